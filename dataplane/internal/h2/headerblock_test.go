package h2

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"reflect"
	"testing"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// headerFrames is two header blocks on streams 1 and 3, each of whose
// HPACK fragment (the fuzzer's bytes) is split at cut into a HEADERS and a
// CONTINUATION frame: the second block reads the first's dynamic table.
func headerFrames(t testing.TB, frag []byte, cut int) []byte {
	var buf bytes.Buffer
	fr := http2.NewFramer(&buf, nil)
	for _, id := range []uint32{1, 3} {
		if cut <= 0 || cut >= len(frag) {
			_ = fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: frag, EndHeaders: true, EndStream: true})
			continue
		}
		_ = fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: frag[:cut], EndStream: true})
		_ = fr.WriteContinuation(id, true, frag[cut:])
	}
	return buf.Bytes()
}

// outcome is what reading one header block gave: the error's kind and
// code, the fields, truncation.
type outcome struct {
	Err       string
	Fields    []hpack.HeaderField
	Truncated bool
}

func classify(err error) string {
	var se http2.StreamError
	var ce http2.ConnectionError
	switch {
	case err == nil:
		return ""
	case errors.As(err, &se):
		return fmt.Sprintf("stream %d %v", se.StreamID, se.Code)
	case errors.As(err, &ce):
		return fmt.Sprintf("connection %v", http2.ErrCode(ce))
	default:
		return "other"
	}
}

// readBoth reads the frames with x/net's ReadMetaHeaders and with
// readFrame, block by block, until either fails.
func readBoth(wire []byte, limit uint32) (xnet, ours []outcome) {
	xf := http2.NewFramer(io.Discard, bytes.NewReader(wire))
	xf.MaxHeaderListSize = limit
	xf.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	c := &conn{}
	c.fr = http2.NewFramer(io.Discard, bytes.NewReader(wire))
	c.fr.MaxHeaderListSize = limit
	c.hdec = hpack.NewDecoder(4096, c.emit)
	for range 2 {
		f, err := xf.ReadFrame()
		o := outcome{Err: classify(err)}
		if mh, ok := f.(*http2.MetaHeadersFrame); ok && err == nil {
			o.Fields, o.Truncated = mh.Fields, mh.Truncated
		}
		xnet = append(xnet, o)
		g, err2 := c.readFrame()
		p := outcome{Err: classify(err2)}
		if b, ok := g.(*headerBlock); ok && err2 == nil {
			p.Fields, p.Truncated = append([]hpack.HeaderField(nil), b.Fields...), b.Truncated
		}
		ours = append(ours, p)
		if err != nil || err2 != nil {
			break
		}
	}
	return xnet, ours
}

// The header block reader accepts, refuses and truncates exactly what
// x/net's ReadMetaHeaders does, with the same errors and fields: here for
// well-formed blocks, each kind of malformed one, and one past the list's
// limit.
func TestHeaderBlockAsXNet(t *testing.T) {
	enc := func(fields ...string) []byte {
		var b bytes.Buffer
		e := hpack.NewEncoder(&b)
		for i := 0; i+1 < len(fields); i += 2 {
			_ = e.WriteField(hpack.HeaderField{Name: fields[i], Value: fields[i+1]})
		}
		return b.Bytes()
	}
	req := []string{":method", "GET", ":scheme", "https", ":path", "/a", ":authority", "web", "user-agent", "x", "accept", "*/*"}
	cases := map[string][]byte{
		"request":              enc(req...),
		"response":             enc(":status", "200", "content-type", "text/plain"),
		"trailers":             enc("grpc-status", "0"),
		"upper-case name":      enc(":method", "GET", "User-Agent", "x"),
		"pseudo after regular": enc("accept", "*/*", ":method", "GET"),
		"unknown pseudo":       enc(":bogus", "1"),
		"duplicate pseudo":     enc(":method", "GET", ":method", "POST"),
		"request and response": enc(":method", "GET", ":status", "200"),
		"bad value":            enc(":method", "GET", "x", "a\x00b"),
		"empty name":           enc(":method", "GET", "", "v"),
		"past the limit":       enc(append(req, "big", string(bytes.Repeat([]byte("v"), 300)))...),
		"trailer budget":       enc(":method", "GET", "trailer", "a,b,c,d,e,f,g,h,i,j,k,l,m,n,o,p,q,r,s,t"),
		"bad hpack":            {0xff, 0xff, 0xff, 0xff, 0xff},
		"truncated hpack":      enc(req...)[:7],
	}
	for name, frag := range cases {
		for _, cut := range []int{0, len(frag) / 2} {
			want, got := readBoth(headerFrames(t, frag, cut), 400)
			if !reflect.DeepEqual(want, got) {
				t.Errorf("%s (cut %d): x/net %+v, readFrame %+v", name, cut, want, got)
			}
		}
	}
}

// FuzzHeaderBlock: for any HPACK bytes, split anywhere, the reader agrees
// with x/net's (and does not panic).
func FuzzHeaderBlock(f *testing.F) {
	f.Add([]byte{0x82, 0x86, 0x84, 0x41, 0x03, 'w', 'e', 'b'}, 3, uint16(400))
	f.Add([]byte{0x40, 0x01, 'A', 0x01, 'b'}, 0, uint16(100))
	f.Fuzz(func(t *testing.T, frag []byte, cut int, limit uint16) {
		want, got := readBoth(headerFrames(t, frag, cut), uint32(limit)+1)
		if !reflect.DeepEqual(want, got) {
			t.Fatalf("x/net %+v, readFrame %+v", want, got)
		}
	})
}
