// Command images builds meshlet's sidecar and injector images as OCI image
// layouts and layout tarballs, without a container engine, and pushes them
// (package internal/images does the work; make images and make push run
// it; docs/reference/images.md describes the images).
//
//	images build -dir DIR [-root MODULE] [-repository R] [-tag T] [-version V] [-revision C] [-source URL] [-epoch S] [-platforms P,...] [-pgo auto|off] [-images NAME,...]
//	images push -dir DIR -registry HOST/PATH [-tag T] [-insecure]
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/meshlet-dev/meshlet/internal/images"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "images:", err)
		os.Exit(2)
	}
}

const usage = `usage:
  images build -dir DIR [flags]   build the shipped images into DIR (OCI layouts DIR/NAME and tarballs DIR/NAME.tar)
  images push -dir DIR -registry HOST/PATH [flags]   push what build wrote to HOST/PATH/NAME:TAG
"images build -help" and "images push -help" list the flags.`

func run(ctx context.Context, args []string, out io.Writer) error {
	if len(args) == 0 {
		return errors.New(usage)
	}
	switch args[0] {
	case "build":
		return build(ctx, args[1:], out)
	case "push":
		return push(ctx, args[1:], out)
	}
	return fmt.Errorf("unknown command %q\n%s", args[0], usage)
}

func build(ctx context.Context, args []string, out io.Writer) error {
	fs := flag.NewFlagSet("images build", flag.ContinueOnError)
	dir := fs.String("dir", "", "`DIR` to write the layouts and tarballs into (required)")
	root := fs.String("root", ".", "the module's root `FOLDER`, where go build runs")
	repo := fs.String("repository", "ghcr.io/meshlet-dev", "`REPOSITORY` the layouts name the images in (REPOSITORY/NAME:TAG)")
	tag := fs.String("tag", "latest", "`TAG` the layouts name the images with")
	version := fs.String("version", "", "org.opencontainers.image.version `V`")
	revision := fs.String("revision", "", "org.opencontainers.image.revision: the git `COMMIT`")
	source := fs.String("source", "https://github.com/meshlet-dev/meshlet", "org.opencontainers.image.source `URL`")
	epoch := fs.String("epoch", os.Getenv("SOURCE_DATE_EPOCH"), "every timestamp in the images, in `SECONDS` since 1970 (default $SOURCE_DATE_EPOCH, else 0)")
	platforms := fs.String("platforms", "linux/amd64,linux/arm64", "`OS/ARCH,...` to build for")
	pgo := fs.String("pgo", "auto", "go build -pgo `MODE`: auto (the sidecar's default.pgo, as make sidecar) or off")
	names := fs.String("images", "sidecar,injector", "the `NAMES` of the images to build: sidecar, injector, and "+images.E2EApp.Name+" (the end-to-end tests' app, for make e2e-cluster on a cluster without a registry)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *dir == "" || fs.NArg() > 0 {
		return errors.New("images build: need -dir DIR and no arguments")
	}
	secs := int64(0)
	if *epoch != "" {
		var err error
		if secs, err = strconv.ParseInt(*epoch, 10, 64); err != nil || secs < 0 {
			return fmt.Errorf("images build: -epoch %q: want seconds since 1970", *epoch)
		}
	}
	var plats []v1.Platform
	for _, s := range strings.Split(*platforms, ",") {
		p, err := v1.ParsePlatform(strings.TrimSpace(s))
		if err != nil {
			return fmt.Errorf("images build: -platforms %q: %w", s, err)
		}
		plats = append(plats, *p)
	}
	work, err := os.MkdirTemp("", "meshlet-images-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)
	meta := images.Meta{Version: *version, Revision: *revision, Source: *source, Created: time.Unix(secs, 0).UTC()}
	known := map[string]images.Spec{images.E2EApp.Name: images.E2EApp}
	for _, sp := range images.Shipped() {
		known[sp.Name] = sp
	}
	var specs []images.Spec
	seen := map[string]bool{}
	for _, n := range strings.Split(*names, ",") {
		n = strings.TrimSpace(n)
		sp, ok := known[n]
		if !ok {
			return fmt.Errorf("images build: -images %q: no image %q (want sidecar, injector or %s)", *names, n, images.E2EApp.Name)
		}
		if !seen[n] {
			seen[n] = true
			specs = append(specs, sp)
		}
	}
	idxs, err := images.Build(ctx, images.Options{Root: *root, Platforms: plats, PGO: *pgo, Meta: meta, WorkDir: work}, specs...)
	if err != nil {
		return err
	}
	for i, s := range specs {
		ref, err := name.NewTag(*repo + "/" + s.Name + ":" + *tag)
		if err != nil {
			return fmt.Errorf("images build: -repository %q -tag %q: %w", *repo, *tag, err)
		}
		tarPath, err := images.WriteLayout(*dir, s.Name, ref, idxs[i], meta.Created)
		if err != nil {
			return err
		}
		if err := describe(out, s.Name, idxs[i], tarPath); err != nil {
			return err
		}
	}
	return nil
}

// describe prints an index's digest, where its tarball is, and each
// platform's manifest digest and compressed size (config and layers).
func describe(out io.Writer, name string, idx v1.ImageIndex, tarPath string) error {
	d, err := idx.Digest()
	if err != nil {
		return err
	}
	st, err := os.Stat(tarPath)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "%s %s %s (%.1f MiB)\n", name, d, filepath.Clean(tarPath), float64(st.Size())/(1<<20))
	m, err := idx.IndexManifest()
	if err != nil {
		return err
	}
	for _, desc := range m.Manifests {
		img, err := idx.Image(desc.Digest)
		if err != nil {
			return err
		}
		im, err := img.Manifest()
		if err != nil {
			return err
		}
		size := im.Config.Size
		for _, l := range im.Layers {
			size += l.Size
		}
		fmt.Fprintf(out, "  %s %s %.1f MiB compressed\n", desc.Platform, desc.Digest, float64(size)/(1<<20))
	}
	return nil
}

func push(ctx context.Context, args []string, out io.Writer) error {
	fs := flag.NewFlagSet("images push", flag.ContinueOnError)
	dir := fs.String("dir", "", "`DIR` images build wrote (required)")
	registry := fs.String("registry", "", "`HOST/PATH` to push to, as HOST/PATH/NAME:TAG (required)")
	tag := fs.String("tag", "latest", "`TAG` to push")
	insecure := fs.Bool("insecure", false, "allow plain HTTP (without it, only loopback, .local and private addresses are reached over HTTP)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *dir == "" || *registry == "" || fs.NArg() > 0 {
		return errors.New("images push: need -dir DIR and -registry HOST/PATH, and no arguments")
	}
	var opts []name.Option
	if *insecure {
		opts = append(opts, name.Insecure)
	}
	for _, s := range images.Shipped() {
		ref, err := name.NewTag(strings.TrimSuffix(*registry, "/")+"/"+s.Name+":"+*tag, opts...)
		if err != nil {
			return fmt.Errorf("images push: -registry %q -tag %q: %w", *registry, *tag, err)
		}
		idx, err := images.ReadLayout(*dir, s.Name)
		if err != nil {
			return err
		}
		d, err := images.Push(ctx, idx, ref, remote.WithAuthFromKeychain(authn.DefaultKeychain))
		if err != nil {
			return err
		}
		fmt.Fprintf(out, "%s@%s\n", ref, d)
	}
	return nil
}
