package images

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// WriteLayout writes idx as an OCI image layout in the folder dir/name
// (replacing what was there, so that no blob of an earlier build stays in
// it) and the same layout as the tar dir/name.tar (tarDir: the same bytes
// for the same images). The layout's index.json names the index ref:
// org.opencontainers.image.ref.name is ref's tag (the OCI convention),
// io.containerd.image.name the whole reference (the name ctr import and
// docker load give it). It returns the tar's path.
func WriteLayout(dir, name string, ref name.Tag, idx v1.ImageIndex, mtime time.Time) (string, error) {
	folder := filepath.Join(dir, name)
	if err := os.RemoveAll(folder); err != nil {
		return "", fmt.Errorf("images: layout %s: %w", folder, err)
	}
	p, err := layout.Write(folder, empty.Index)
	if err != nil {
		return "", fmt.Errorf("images: layout %s: %w", folder, err)
	}
	if err := p.AppendIndex(idx, layout.WithAnnotations(map[string]string{
		"org.opencontainers.image.ref.name": ref.TagStr(),
		"io.containerd.image.name":          ref.Name(),
	})); err != nil {
		return "", fmt.Errorf("images: layout %s: write %s: %w", folder, ref, err)
	}
	tarPath := folder + ".tar"
	f, err := os.Create(tarPath)
	if err != nil {
		return "", fmt.Errorf("images: layout tar: %w", err)
	}
	if err := tarDir(f, folder, mtime); err != nil {
		f.Close()
		return "", err
	}
	if err := f.Close(); err != nil {
		return "", fmt.Errorf("images: layout tar %s: %w", tarPath, err)
	}
	return tarPath, nil
}

// ReadLayout is the index WriteLayout wrote in the folder dir/name.
func ReadLayout(dir, name string) (v1.ImageIndex, error) {
	folder := filepath.Join(dir, name)
	top, err := layout.ImageIndexFromPath(folder)
	if err != nil {
		return nil, fmt.Errorf("images: read layout %s: %w", folder, err)
	}
	m, err := top.IndexManifest()
	if err != nil {
		return nil, fmt.Errorf("images: read layout %s: %w", folder, err)
	}
	if len(m.Manifests) != 1 || m.Manifests[0].MediaType != types.OCIImageIndex {
		return nil, fmt.Errorf("images: layout %s: want one image index in index.json, have %d manifests", folder, len(m.Manifests))
	}
	idx, err := top.ImageIndex(m.Manifests[0].Digest)
	if err != nil {
		return nil, fmt.Errorf("images: layout %s: %w", folder, err)
	}
	return idx, nil
}

// Push pushes idx, its images and their blobs to ref with
// go-containerregistry's remote (blobs the registry has are not sent
// again) and returns the index's digest, the digest to pin.
func Push(ctx context.Context, idx v1.ImageIndex, ref name.Reference, opts ...remote.Option) (v1.Hash, error) {
	d, err := idx.Digest()
	if err != nil {
		return v1.Hash{}, fmt.Errorf("images: push %s: %w", ref, err)
	}
	if err := remote.WriteIndex(ref, idx, append(opts, remote.WithContext(ctx))...); err != nil {
		return v1.Hash{}, fmt.Errorf("images: push %s: %w", ref, err)
	}
	return d, nil
}
