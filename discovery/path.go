package discovery

import (
	"fmt"
	"strconv"
)

// path is a field's location in the input, Envoy JSON style:
// load_assignment.endpoints[1].lb_endpoints[0]. The empty path is the root.
type path string

// field returns the path of the named field below p.
func (p path) field(name string) path {
	if p == "" {
		return path(name)
	}
	return p + "." + path(name)
}

// index returns the path of element i of the list at p.
func (p path) index(i int) path { return p + path("["+strconv.Itoa(i)+"]") }

// key returns the path of the map entry k at p.
func (p path) key(k string) path { return p + path("["+strconv.Quote(k)+"]") }

// errorf returns an error located at p.
func (p path) errorf(format string, args ...any) error {
	return &fieldError{path: p, err: fmt.Errorf(format, args...)}
}

// wrap locates err at p; a nil err stays nil.
func (p path) wrap(err error) error {
	if err == nil {
		return nil
	}
	return &fieldError{path: p, err: err}
}

// fieldError is an error at a field of the input. The translators return it
// with paths relative to the message they were given; the exported
// functions prefix what the message is ("cluster \"echo\"", "clusters[2]").
type fieldError struct {
	path path
	err  error
}

func (e *fieldError) Error() string {
	if e.path == "" {
		return e.err.Error()
	}
	return string(e.path) + ": " + e.err.Error()
}

func (e *fieldError) Unwrap() error { return e.err }
