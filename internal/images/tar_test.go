package images

import (
	"archive/tar"
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"
	"time"
)

// TestWriteTar: members come out sorted whatever the order given, with
// their missing parent directories, owned by 0:0 at the time given; the
// same entries in another order give the same bytes; a path that leaves
// the root, or one given twice, is refused.
func TestWriteTar(t *testing.T) {
	at := time.Unix(1700000000, 0)
	a := []entry{{name: "/usr/local/bin/x", mode: 0o755, data: []byte("x")}, {name: "/etc/passwd", mode: 0o644, data: []byte("p")}, {name: "/tmp/", mode: 0o1777}}
	b := []entry{a[2], a[0], a[1]}
	var bufA, bufB bytes.Buffer
	if err := writeTar(&bufA, a, at); err != nil {
		t.Fatal(err)
	}
	if err := writeTar(&bufB, b, at); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(bufA.Bytes(), bufB.Bytes()) {
		t.Error("the same entries in another order gave another tar")
	}
	var names []string
	tr := tar.NewReader(&bufA)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if h.Uid != 0 || h.Gid != 0 || !h.ModTime.Equal(at) {
			t.Errorf("%s: %d:%d at %v", h.Name, h.Uid, h.Gid, h.ModTime)
		}
		names = append(names, h.Name)
	}
	if got, want := strings.Join(names, " "), "etc/ etc/passwd tmp/ usr/ usr/local/ usr/local/bin/ usr/local/bin/x"; got != want {
		t.Errorf("members %q, want %q", got, want)
	}
	for _, bad := range [][]entry{
		{{name: "/../etc/passwd"}}, {{name: "/a/../../b"}}, {{name: "/"}}, {{name: "/./x"}},
		{{name: "/x", data: []byte("1")}, {name: "x", data: []byte("2")}},
	} {
		if err := writeTar(io.Discard, bad, at); err == nil {
			t.Errorf("writeTar(%q) succeeded", bad[0].name)
		}
	}
}
