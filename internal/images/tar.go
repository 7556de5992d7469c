package images

import (
	"archive/tar"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

// entry is one member of a tar this package writes: a directory when its
// name ends in "/", else a regular file holding data.
type entry struct {
	name string
	mode int64
	data []byte
}

// writeTar writes entries as a tar that depends on nothing but them and
// mtime: members sorted by name, every missing parent directory added
// (0755), owner 0:0 with no user or group names, every time mtime. Two
// builds from the same files are byte for byte the same tar, so the same
// layer digest.
func writeTar(w io.Writer, entries []entry, mtime time.Time) error {
	byName := map[string]entry{}
	for _, e := range entries {
		name := strings.TrimPrefix(e.name, "/")
		if clean := strings.TrimSuffix(name, "/"); clean == "" || clean == "." || path.Clean(clean) != clean || strings.HasPrefix(clean, "../") || clean == ".." {
			return fmt.Errorf("images: tar member %q: want a path below /", e.name)
		}
		if _, dup := byName[name]; dup {
			return fmt.Errorf("images: tar member %q given twice", e.name)
		}
		e.name = name
		byName[name] = e
		for dir := path.Dir(strings.TrimSuffix(name, "/")); dir != "."; dir = path.Dir(dir) {
			if _, ok := byName[dir+"/"]; !ok {
				byName[dir+"/"] = entry{name: dir + "/", mode: 0o755}
			}
		}
	}
	names := make([]string, 0, len(byName))
	for n := range byName {
		names = append(names, n)
	}
	sort.Strings(names)
	tw := tar.NewWriter(w)
	for _, n := range names {
		e := byName[n]
		h := &tar.Header{Name: n, Mode: e.mode, ModTime: mtime, Typeflag: tar.TypeReg, Size: int64(len(e.data))}
		if strings.HasSuffix(n, "/") {
			h.Typeflag, h.Size = tar.TypeDir, 0
		}
		if err := tw.WriteHeader(h); err != nil {
			return fmt.Errorf("images: tar member %s: %w", n, err)
		}
		if _, err := tw.Write(e.data); err != nil {
			return fmt.Errorf("images: tar member %s: %w", n, err)
		}
	}
	if err := tw.Close(); err != nil {
		return fmt.Errorf("images: close tar: %w", err)
	}
	return nil
}

// tarDir writes the tree under dir as a tar (writeTar: sorted, 0:0,
// mtime): files 0644, directories 0755, whatever their modes on disk,
// which depend on the umask of whoever built them.
func tarDir(w io.Writer, dir string, mtime time.Time) error {
	var entries []entry
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == dir {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		switch {
		case d.IsDir():
			entries = append(entries, entry{name: rel + "/", mode: 0o755})
		case d.Type().IsRegular():
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			entries = append(entries, entry{name: rel, mode: 0o644, data: b})
		default:
			return fmt.Errorf("%s: neither a file nor a directory", p)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("images: tar %s: %w", dir, err)
	}
	return writeTar(w, entries, mtime)
}
