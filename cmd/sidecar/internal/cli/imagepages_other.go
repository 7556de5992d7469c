//go:build !linux

package cli

import "errors"

// releaseImagePages is Linux-only (it reads /proc/self/pagemap); elsewhere
// it releases nothing.
func releaseImagePages() (int64, error) { return 0, nil }

// singlePageImageFaults is Linux-only (userfaultfd); elsewhere it reports
// that it cannot run.
func singlePageImageFaults() (int64, error) {
	return 0, errors.New("single-page binary faults: only on Linux")
}
