//go:build linux

package dataplane

import (
	"net"
	"os"
	"sync"

	"golang.org/x/sys/unix"
)

// The TCP proxy moves bytes between two sockets with splice(2) through a
// pipe, as io.Copy between two *net.TCPConn does, but with pipes of its
// own. The Go runtime's pipes come from a sync.Pool, are held for the
// whole of an io.Copy (two per proxied connection, four descriptors) and
// are closed only by finalizers, after garbage collections that an idle
// sidecar rarely runs: thousands of them outlived their connections. Here
// a connection takes a pipe only while bytes are in flight (from a read
// that found some until the pipe is empty again), from a small per-worker
// free list that closes what it cannot keep. An idle connection holds
// none.

// pipePoolSize is how many empty pipes a worker keeps for reuse.
const pipePoolSize = 16

// pipeSize is the pipe buffer asked for (F_SETPIPE_SZ), and the most one
// splice moves: the Go runtime's choice (the default maximum,
// /proc/sys/fs/pipe-max-size). A pipe whose size cannot be set keeps the
// kernel's default (64 KiB) and simply takes more system calls.
const pipeSize = 1 << 20

// pipe is a pipe and how many bytes it holds.
type pipe struct {
	r, w int
	n    int
}

func (p *pipe) close() {
	unix.Close(p.r)
	unix.Close(p.w)
}

// pipePool is a worker's free list of empty pipes.
type pipePool struct {
	mu     sync.Mutex
	free   []*pipe
	max    int
	closed bool
}

func newPipePool(size int) *pipePool { return &pipePool{max: size} }

func (pp *pipePool) get() (*pipe, error) {
	pp.mu.Lock()
	if n := len(pp.free); n > 0 {
		p := pp.free[n-1]
		pp.free[n-1] = nil
		pp.free = pp.free[:n-1]
		pp.mu.Unlock()
		return p, nil
	}
	pp.mu.Unlock()
	var fds [2]int
	if err := unix.Pipe2(fds[:], unix.O_CLOEXEC|unix.O_NONBLOCK); err != nil {
		return nil, os.NewSyscallError("pipe2", err)
	}
	_, _ = unix.FcntlInt(uintptr(fds[1]), unix.F_SETPIPE_SZ, pipeSize)
	return &pipe{r: fds[0], w: fds[1]}, nil
}

// put returns an empty pipe to the free list, or closes it (a pipe that
// still holds bytes, a full list, a closed pool).
func (pp *pipePool) put(p *pipe) {
	if p.n == 0 {
		pp.mu.Lock()
		if !pp.closed && len(pp.free) < pp.max {
			pp.free = append(pp.free, p)
			pp.mu.Unlock()
			return
		}
		pp.mu.Unlock()
	}
	p.close()
}

// close closes the free pipes; pipes put back later are closed too.
func (pp *pipePool) close() {
	if pp == nil {
		return
	}
	pp.mu.Lock()
	free := pp.free
	pp.free, pp.closed = nil, true
	pp.mu.Unlock()
	for _, p := range free {
		p.close()
	}
}

// idle is the number of pipes on the free list.
func (pp *pipePool) idle() int {
	pp.mu.Lock()
	defer pp.mu.Unlock()
	return len(pp.free)
}

// splice copies src to dst until src's end (nil error) or an error,
// touching idle whenever bytes move. It returns the bytes written to dst.
// errNoSplice means that no pipe could be had (descriptors short) or that
// the sockets refused the first splice; no bytes are in flight then, and
// the caller copies the rest with read and write.
func (pp *pipePool) splice(dst, src *net.TCPConn, idle *idleWatch) (int64, error) {
	if pp == nil {
		return 0, errNoSplice
	}
	rsrc, err := src.SyscallConn()
	if err != nil {
		return 0, err
	}
	rdst, err := dst.SyscallConn()
	if err != nil {
		return 0, err
	}
	var (
		p          *pipe
		total      int64
		rerr, werr error
		eof        bool
		moved      bool // a splice has worked: errors are no longer "unsupported"
	)
	defer func() {
		if p != nil {
			pp.put(p) // closed unless empty
		}
	}()
	const flags = unix.SPLICE_F_NONBLOCK | unix.SPLICE_F_MOVE
	fill := func(fd uintptr) bool {
		if p == nil {
			var err error
			if p, err = pp.get(); err != nil {
				rerr = errNoSplice
				return true
			}
		}
		for {
			n, err := unix.Splice(int(fd), nil, p.w, nil, pipeSize, flags)
			switch {
			case err == unix.EINTR:
				continue
			case err == unix.EAGAIN:
				// Nothing to read: the empty pipe waits on the free list,
				// not with this connection.
				pp.put(p)
				p = nil
				return false
			case err != nil:
				rerr = os.NewSyscallError("splice", err)
				if !moved && (err == unix.EINVAL || err == unix.ENOSYS || err == unix.EOPNOTSUPP) {
					rerr = errNoSplice
				}
			case n == 0:
				eof = true
			default:
				p.n = int(n)
				moved = true
			}
			return true
		}
	}
	drain := func(fd uintptr) bool {
		for p.n > 0 {
			n, err := unix.Splice(p.r, nil, int(fd), nil, p.n, flags)
			switch {
			case err == unix.EINTR:
			case err == unix.EAGAIN:
				return false // wait until dst has room
			case err != nil:
				werr = os.NewSyscallError("splice", err)
				return true
			default:
				p.n -= int(n)
				total += int64(n)
				idle.touch()
			}
		}
		return true
	}
	for {
		if err := rsrc.Read(fill); err != nil {
			return total, err // closed, or a deadline
		}
		if rerr != nil || eof {
			return total, rerr
		}
		idle.touch()
		if err := rdst.Write(drain); err != nil {
			return total, err
		}
		if werr != nil {
			return total, werr
		}
	}
}
