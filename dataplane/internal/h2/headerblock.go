package h2

import (
	"errors"
	"strings"

	"golang.org/x/net/http/httpguts"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// headerBlock is a HEADERS frame with its CONTINUATIONs' fragments
// decoded: what x/net's Framer gives with ReadMetaHeaders set, and checked
// the same way, without a frame, a field list and a closure allocated per
// block. Each connection reuses its own: a block is valid until the
// reader's next frame.
type headerBlock struct {
	*http2.HeadersFrame
	// Fields are the decoded fields, pseudo-headers first.
	Fields []hpack.HeaderField
	// Truncated: the list passed SETTINGS_MAX_HEADER_LIST_SIZE; the
	// fields past it were dropped.
	Truncated bool

	// The decoder's emit state for the block being read.
	invalid                   error // a field that makes the block malformed
	sawRegular                bool
	headersLeft, trailersLeft uint32
}

var (
	errPseudoAfterRegular = errors.New("h2: pseudo-header after a regular header")
	errBadFieldName       = errors.New("h2: invalid header field name")
	errBadFieldValue      = errors.New("h2: invalid header field value")
	errBadPseudo          = errors.New("h2: unknown, duplicated or mixed pseudo-headers")
)

// readFrame is the framer's next frame; a HEADERS frame comes back as the
// connection's *headerBlock, its CONTINUATIONs read and the block
// decoded. The errors are x/net's for the same input: a connection error
// for a list far past the limit or a fragment after a malformed field
// (PROTOCOL_ERROR) and for what HPACK cannot decode (COMPRESSION_ERROR);
// a stream error, with the block, for a malformed field.
func (c *conn) readFrame() (http2.Frame, error) {
	f, err := c.fr.ReadFrame()
	if err != nil {
		return f, err
	}
	hf, ok := f.(*http2.HeadersFrame)
	if !ok {
		return f, nil
	}
	b := &c.block
	limit := c.fr.MaxHeaderListSize
	if limit == 0 {
		limit = 16 << 20 // x/net's default
	}
	*b = headerBlock{HeadersFrame: hf, Fields: b.Fields[:0], headersLeft: limit, trailersLeft: limit}
	c.hdec.SetEmitEnabled(true)
	c.hdec.SetMaxStringLength(int(limit))
	frag := hf.HeaderBlockFragment()
	ended := hf.HeadersEnded()
	for {
		// A fragment far past what may still be taken is not decoded.
		if int64(len(frag)) > 2*int64(b.headersLeft+b.trailersLeft) || b.invalid != nil {
			return b, http2.ConnectionError(http2.ErrCodeProtocol)
		}
		if _, err := c.hdec.Write(frag); err != nil {
			return b, http2.ConnectionError(http2.ErrCodeCompression)
		}
		if ended {
			break
		}
		// The framer refuses anything but this stream's CONTINUATION.
		f, err := c.fr.ReadFrame()
		if err != nil {
			return nil, err
		}
		cf := f.(*http2.ContinuationFrame)
		frag, ended = cf.HeaderBlockFragment(), cf.HeadersEnded()
	}
	if err := c.hdec.Close(); err != nil {
		return b, http2.ConnectionError(http2.ErrCodeCompression)
	}
	if b.invalid == nil {
		b.invalid = checkPseudos(b.PseudoFields())
	}
	if b.invalid != nil {
		return b, http2.StreamError{StreamID: hf.StreamID, Code: http2.ErrCodeProtocol, Cause: b.invalid}
	}
	return b, nil
}

// emit takes one decoded field into the connection's block: checked as
// x/net checks it, counted against the list's limit (the Trailer field's
// names on a budget of their own, as x/net counts them).
func (c *conn) emit(hf hpack.HeaderField) {
	b := &c.block
	if !httpguts.ValidHeaderFieldValue(hf.Value) {
		b.invalid = errBadFieldValue
	}
	if strings.HasPrefix(hf.Name, ":") {
		if b.sawRegular {
			b.invalid = errPseudoAfterRegular
		}
	} else {
		b.sawRegular = true
		if !validWireName(hf.Name) {
			b.invalid = errBadFieldName
		}
	}
	if b.invalid != nil {
		c.hdec.SetEmitEnabled(false)
		return
	}
	left, size := &b.headersLeft, hf.Size()
	if hf.Name == "trailer" {
		n := uint32(strings.Count(hf.Value, ",") + 1)
		left, size = &b.trailersLeft, uint32(len(hf.Value))-n+1+n*hpack.HeaderField{}.Size()
	}
	if size > *left {
		c.hdec.SetEmitEnabled(false)
		b.Truncated = true
		b.headersLeft, b.trailersLeft = 0, 0
		return
	}
	*left -= size
	b.Fields = append(b.Fields, hf)
}

// validWireName reports whether name is a valid lower-case field name
// (RFC 9113 8.2.1: upper case is malformed on the wire).
func validWireName(name string) bool {
	if name == "" {
		return false
	}
	for i := 0; i < len(name); i++ {
		ch := name[i]
		if 'A' <= ch && ch <= 'Z' || !httpguts.IsTokenRune(rune(ch)) {
			return false
		}
	}
	return true
}

// checkPseudos refuses unknown and duplicated pseudo-headers and a block
// mixing a request's with a response's.
func checkPseudos(pf []hpack.HeaderField) error {
	var request, response bool
	for i, hf := range pf {
		switch hf.Name {
		case ":method", ":path", ":scheme", ":authority", ":protocol":
			request = true
		case ":status":
			response = true
		default:
			return errBadPseudo
		}
		for _, prev := range pf[:i] {
			if prev.Name == hf.Name {
				return errBadPseudo
			}
		}
	}
	if request && response {
		return errBadPseudo
	}
	return nil
}

// PseudoFields is the block's pseudo-headers.
func (b *headerBlock) PseudoFields() []hpack.HeaderField {
	for i, hf := range b.Fields {
		if !strings.HasPrefix(hf.Name, ":") {
			return b.Fields[:i]
		}
	}
	return b.Fields
}

// RegularFields is the block's fields after its pseudo-headers.
func (b *headerBlock) RegularFields() []hpack.HeaderField {
	return b.Fields[len(b.PseudoFields()):]
}

// PseudoValue is the value of pseudo-header ":"+name, or "".
func (b *headerBlock) PseudoValue(name string) string {
	for _, hf := range b.PseudoFields() {
		if hf.Name[1:] == name {
			return hf.Value
		}
	}
	return ""
}
