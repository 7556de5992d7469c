// Package rawio reads and writes TCP sockets with raw system calls where
// the platform has them (Linux), so that a request's reads and writes do
// not go through the scheduler's system-call path; elsewhere it hands the
// connection back unchanged.
package rawio

// Queuer is a socket whose writes can be queued to go out with its next
// read (Socket.QueueForRead): a request's head and the read of its
// response then cost one wake-up instead of two.
type Queuer interface {
	// QueueForRead queues p to be sent at the start of the next Read.
	QueueForRead(p []byte)
	// WaitAfterQueued lets the next Read wait for readiness once the
	// queue is out, without first trying a read that would find nothing.
	WaitAfterQueued()
	// FlushQueued sends what is queued now.
	FlushQueued() error
	// Queued says whether queued bytes are still unsent.
	Queued() bool
	// Drained says whether the last read found the socket emptied.
	Drained() bool
}
