package bpf

import (
	"errors"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"

	"github.com/cilium/ebpf/link"
)

func sweep(t *testing.T, args ...string) (string, error) {
	t.Helper()
	out, err := exec.Command("./sweep.sh", args...).CombinedOutput()
	t.Logf("sweep.sh %s: %v\n%s", strings.Join(args, " "), err, out)
	return string(out), err
}

// TestSweepAfterKill: a process builds a pod fixture (cgroups, two network
// namespaces with a veth), loads and attaches, and is SIGKILLed. Its
// attachments are gone with it; its cgroups and namespaces are not, and
// sweep.sh finds and removes exactly those, leaving nothing for --check.
func TestSweepAfterKill(t *testing.T) {
	requireRoot(t)
	h := startHelper(t, helperOpts{role: "fixture"})
	var ready fixtureReady
	h.nextJSON(t, "READY", &ready)
	pid := strconv.Itoa(h.cmd.Process.Pid)

	// A live owner's fixtures are listed but not swept.
	if out, err := sweep(t, "--check", "--pid", pid); err == nil || strings.Count(out, "\n") != len(ready.Cgroups[:1])+len(ready.Netns) {
		t.Errorf("sweep.sh --check on the live fixture: %v, want its pod cgroup and %d namespaces listed", err, len(ready.Netns))
	}
	if _, err := sweep(t); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(ready.Cgroups[0]); err != nil {
		t.Fatalf("sweep.sh removed a live process's cgroup: %v", err)
	}

	if err := h.cmd.Process.Signal(os.Kill); err != nil {
		t.Fatal(err)
	}
	h.cmd.Wait()
	waitFor(t, "the killed fixture's links", func() (bool, string) {
		var left []string
		for _, id := range ready.LinkIDs {
			if l, err := link.NewFromID(link.ID(id)); err == nil {
				l.Close()
				left = append(left, strconv.Itoa(int(id)))
			} else if !errors.Is(err, os.ErrNotExist) {
				t.Fatal(err)
			}
		}
		return len(left) == 0, "links " + strings.Join(left, ",")
	})
	for _, cg := range ready.Cgroups {
		if _, err := os.Stat(cg); err != nil {
			t.Errorf("cgroup %s is gone before the sweep (%v): the test proves nothing", cg, err)
		}
	}

	out, err := sweep(t)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range append(ready.Netns, ready.Cgroups[0]) {
		if !strings.Contains(out, n) {
			t.Errorf("sweep.sh did not report %s", n)
		}
	}
	if out, err := sweep(t, "--check", "--pid", pid); err != nil || out != "" {
		t.Errorf("sweep.sh --check after the sweep: %v %q, want nothing left", err, out)
	}
	for _, cg := range ready.Cgroups {
		if _, err := os.Stat(cg); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("cgroup %s still there: %v", cg, err)
		}
	}
	nsList, _ := exec.Command("ip", "netns", "list").Output()
	for _, ns := range ready.Netns {
		if strings.Contains(string(nsList), ns) {
			t.Errorf("netns %s still there", ns)
		}
	}
}

// TestSweepTmpDir: the e2e suite's temporary directory of a process that
// is gone (meshlet-test-<pid>-tmp, its TMPDIR) is listed by --check and
// removed by a sweep; a live process's is kept.
func TestSweepTmpDir(t *testing.T) {
	gone := exec.Command("true")
	if err := gone.Run(); err != nil {
		t.Fatal(err)
	}
	pid := strconv.Itoa(gone.Process.Pid)
	dir := os.TempDir() + "/meshlet-test-" + pid + "-tmp"
	live := os.TempDir() + "/meshlet-test-" + strconv.Itoa(os.Getpid()) + "-tmp"
	for _, d := range []string{dir + "/layers", live} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() { os.RemoveAll(dir); os.RemoveAll(live) })
	if out, err := sweep(t, "--check", "--pid", pid); err == nil || !strings.Contains(out, "tmp "+dir) {
		t.Fatalf("--check --pid %s: %v %q, want the directory listed and exit 1", pid, err, out)
	}
	if out, err := sweep(t, "--pid", pid); err != nil || !strings.Contains(out, "tmp "+dir) {
		t.Fatalf("--pid %s: %v %q, want the directory removed", pid, err, out)
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("%s still there after the sweep: %v", dir, err)
	}
	if _, err := sweep(t, "--check", "--pid", pid); err != nil {
		t.Errorf("--check after the sweep: %v", err)
	}
	// The live process's (this test's) is not a leftover without --all.
	if out, _ := sweep(t, "--check"); strings.Contains(out, live) {
		t.Errorf("--check lists a live process's directory: %q", out)
	}
}
