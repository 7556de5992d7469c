package sds_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/meshlet-dev/meshlet/sds"
)

func TestTokenFile(t *testing.T) {
	p := filepath.Join(t.TempDir(), "token")
	src := sds.TokenFile(p)
	if _, err := src(context.Background()); err == nil {
		t.Error("missing file: no error")
	}
	os.WriteFile(p, []byte("first\n"), 0o600)
	if tok, err := src(context.Background()); err != nil || tok != "first" {
		t.Errorf("got %q, %v", tok, err)
	}
	os.WriteFile(p, []byte("rotated"), 0o600) // the kubelet replaced it
	if tok, _ := src(context.Background()); tok != "rotated" {
		t.Errorf("got %q after rotation", tok)
	}
	os.WriteFile(p, nil, 0o600)
	if _, err := src(context.Background()); err == nil || !strings.Contains(err.Error(), "empty") {
		t.Errorf("empty file: %v", err)
	}
}
