// Command mkimage writes a one-layer image of static binaries as a docker
// archive: mkimage -o out.tar -tag docker.io/local/x:v1 -entrypoint /x SRC=DST...
package main

import (
	"archive/tar"
	"bytes"
	"flag"
	"io"
	"log"
	"os"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

func main() {
	out := flag.String("o", "", "output tar")
	tag := flag.String("tag", "", "image reference")
	entry := flag.String("entrypoint", "", "entrypoint path")
	flag.Parse()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	dirs := map[string]bool{}
	dir := func(d string) {
		for p := ""; ; {
			i := strings.Index(d[len(p):], "/")
			if i < 0 {
				return
			}
			p = d[:len(p)+i+1]
			if !dirs[p] {
				dirs[p] = true
				tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: p, Mode: 0o755})
			}
		}
	}
	for _, d := range []string{"tmp/", "etc/", "var/run/"} {
		dir(d)
	}
	for _, arg := range flag.Args() {
		src, dst, ok := strings.Cut(arg, "=")
		if !ok {
			log.Fatalf("mkimage: %q: want SRC=DST", arg)
		}
		dst = strings.TrimPrefix(dst, "/")
		dir(dst)
		f, err := os.Open(src)
		if err != nil {
			log.Fatal(err)
		}
		st, _ := f.Stat()
		tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: dst, Mode: 0o755, Size: st.Size()})
		io.Copy(tw, f)
		f.Close()
	}
	tw.Close()
	layer, err := tarball.LayerFromReader(bytes.NewReader(buf.Bytes()))
	if err != nil {
		log.Fatal(err)
	}
	img, err := mutate.AppendLayers(empty.Image, layer)
	if err != nil {
		log.Fatal(err)
	}
	cf, _ := img.ConfigFile()
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", "amd64"
	cf.Config = v1.Config{Entrypoint: []string{*entry}}
	if img, err = mutate.ConfigFile(img, cf); err != nil {
		log.Fatal(err)
	}
	ref, err := name.NewTag(*tag)
	if err != nil {
		log.Fatal(err)
	}
	if err := tarball.WriteToFile(*out, ref, img); err != nil {
		log.Fatal(err)
	}
}
