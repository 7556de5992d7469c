package cli

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/meshlet-dev/meshlet/bpf"

	"github.com/meshlet-dev/meshlet/internal/privileged"
)

// TestDropPrivileges runs dropPrivileges in a child process (it cannot be
// undone): with real eBPF maps loaded as root, the child switches to
// 1337:1337, every thread ends with no capability, and the maps loaded
// before the switch are still read and written. A probe that fails (one
// that needs CAP_BPF fails in it) leaves the child root. Needs root, as CI runs it.
func TestDropPrivileges(t *testing.T) {
	if mode := os.Getenv("MESHLET_PRIVDROP_CHILD"); mode != "" {
		privDropChild(t, mode)
		return
	}
	privileged.Root(t, "this test drops root privileges in a child process and loads eBPF maps")
	for _, mode := range []string{"drop", "probe-fails"} {
		t.Run(mode, func(t *testing.T) {
			cmd := exec.Command(os.Args[0], "-test.run=^TestDropPrivileges$", "-test.v")
			cmd.Env = append(os.Environ(), "MESHLET_PRIVDROP_CHILD="+mode)
			out, err := cmd.CombinedOutput()
			if err != nil || !strings.Contains(string(out), "--- PASS") {
				t.Fatalf("child (%s): %v\n%s", mode, err, out)
			}
			t.Logf("child:\n%s", out)
		})
	}
}

func privDropChild(t *testing.T, mode string) {
	objs, err := bpf.Load(bpf.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer objs.Close()
	probe := func() error { _, err := objs.Counters(); return err }
	if mode == "probe-fails" {
		want := errors.New("injected probe failure")
		probe = func() error { return want }
		err := dropPrivileges(1337, 1337, probe)
		if !errors.Is(err, errMapsNeedPrivilege) || !errors.Is(err, want) {
			t.Fatalf("dropPrivileges with a failing probe: %v", err)
		}
		t.Logf("refused: %v", err)
		// The probe runs without capabilities: loading programs (CAP_BPF)
		// fails in it.
		err = dropPrivileges(1337, 1337, func() error {
			o, err := bpf.Load(bpf.Options{})
			if err == nil {
				o.Close()
			}
			return err
		})
		if !errors.Is(err, errMapsNeedPrivilege) {
			t.Fatalf("a probe loading eBPF programs passed: it ran privileged (%v)", err)
		}
		if os.Geteuid() != 0 || os.Getuid() != 0 {
			t.Fatalf("after a failed probe the process is uid %d/%d, want still root", os.Getuid(), os.Geteuid())
		}
		if err := checkCredentials(0, 0); err == nil {
			t.Fatal("checkCredentials(0, 0) passed for a root process holding capabilities")
		}
		return
	}
	if err := dropPrivileges(1337, 1337, probe); err != nil {
		t.Fatal(err)
	}
	status, _ := os.ReadFile("/proc/self/status")
	for _, l := range strings.Split(string(status), "\n") {
		if strings.HasPrefix(l, "Uid:") || strings.HasPrefix(l, "Gid:") || strings.HasPrefix(l, "Cap") || strings.HasPrefix(l, "Groups:") {
			t.Log(l)
		}
	}
	if os.Getuid() != 1337 || os.Getgid() != 1337 {
		t.Fatalf("uid %d gid %d after the drop, want 1337", os.Getuid(), os.Getgid())
	}
	if g, _ := os.Getgroups(); len(g) != 0 {
		t.Fatalf("supplementary groups %v after the drop, want none", g)
	}
	// Privileged things now fail...
	if _, err := bpf.Load(bpf.Options{}); err == nil {
		t.Fatal("loading eBPF programs worked after the drop")
	}
	if err := os.WriteFile("/proc/sys/kernel/osrelease", []byte("x"), 0); err == nil {
		t.Fatal("a root-only write worked after the drop")
	}
	// ...and the maps loaded before it still work: counters read, and
	// exclusions (a map update) written.
	if _, err := objs.Counters(); err != nil {
		t.Fatalf("counters after the drop: %v", err)
	}
	if err := objs.SetExclusions(bpf.Exclusions{OutboundPorts: []uint16{5432}}); err != nil {
		t.Fatalf("map update after the drop: %v", err)
	}
	// A second drop is refused (not root any more).
	if err := dropPrivileges(1337, 1337, nil); err == nil {
		t.Fatal("dropPrivileges as uid 1337 succeeded")
	}
	fmt.Println("dropped")
}
