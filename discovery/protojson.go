package discovery

import (
	"encoding/json"
	"slices"
	"strings"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/dynamicpb"
)

// strictProto decodes Envoy resources: unknown fields are errors.
var strictProto = protojson.UnmarshalOptions{DiscardUnknown: false}

// unmarshalProto decodes the protojson form of m. protojson's errors name a
// field but not where it is (and their line numbers refer to the JSON
// converted from YAML), so on failure the input is searched for the
// innermost field that fails on its own, and the error is located there.
func unmarshalProto(p path, data []byte, m proto.Message) error {
	err := strictProto.Unmarshal(data, m)
	if err == nil {
		return nil
	}
	return locateProtoError(p, data, m.ProtoReflect().Descriptor(), 0).wrap(cleanProtoError(err))
}

// protoError is protojson's message without its "proto: (line 1:23): "
// position prefix.
type protoError string

func (e protoError) Error() string { return string(e) }

func cleanProtoError(err error) error {
	s := err.Error()
	s = strings.TrimPrefix(s, "proto:")
	s = strings.TrimSpace(s)
	if strings.HasPrefix(s, "(line ") {
		if _, rest, ok := strings.Cut(s, "):"); ok {
			s = strings.TrimSpace(rest)
		}
	}
	if strings.Contains(s, "google.protobuf.Duration") {
		s += ` (Envoy durations are seconds with an "s" suffix, such as "0.1s")`
	}
	return protoError(s)
}

// maxLocateDepth bounds the search on pathological inputs.
const maxLocateDepth = 64

// locateProtoError returns the path of the innermost part of data (the JSON
// of a message md) that protojson rejects on its own.
func locateProtoError(p path, data []byte, md protoreflect.MessageDescriptor, depth int) path {
	if depth > maxLocateDepth {
		return p
	}
	depth++
	if md.FullName() == "google.protobuf.Any" {
		return locateInAny(p, data, depth)
	}
	if md.FullName().Parent() == "google.protobuf" {
		return p // well-known types have their own JSON forms
	}
	var obj map[string]json.RawMessage
	if json.Unmarshal(data, &obj) != nil {
		return p
	}
	keys := make([]string, 0, len(obj))
	for k := range obj {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		fd := md.Fields().ByJSONName(k)
		if fd == nil {
			fd = md.Fields().ByName(protoreflect.Name(k))
		}
		if fd == nil {
			return p.field(k)
		}
		one, _ := json.Marshal(map[string]json.RawMessage{k: obj[k]})
		if protoAccepts(one, md) {
			continue
		}
		return locateInField(p.field(string(fd.Name())), obj[k], fd, depth)
	}
	return p
}

// locateInField searches the value of field fd.
func locateInField(p path, data []byte, fd protoreflect.FieldDescriptor, depth int) path {
	switch {
	case fd.IsList():
		var list []json.RawMessage
		if json.Unmarshal(data, &list) != nil {
			return p
		}
		for i, el := range list {
			if fd.Message() != nil {
				if !protoAccepts(el, fd.Message()) {
					return locateProtoError(p.index(i), el, fd.Message(), depth)
				}
				continue
			}
			one, _ := json.Marshal(map[string]any{fd.JSONName(): []json.RawMessage{el}})
			if !protoAccepts(one, fd.ContainingMessage()) {
				return p.index(i)
			}
		}
	case fd.IsMap():
		var m map[string]json.RawMessage
		if json.Unmarshal(data, &m) != nil || fd.MapValue().Message() == nil {
			return p
		}
		keys := make([]string, 0, len(m))
		for k := range m {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			if vd := fd.MapValue().Message(); !protoAccepts(m[k], vd) {
				return locateProtoError(p.key(k), m[k], vd, depth)
			}
		}
	case fd.Message() != nil:
		return locateProtoError(p, data, fd.Message(), depth)
	}
	return p
}

// locateInAny searches an Any: its @type, then its content.
func locateInAny(p path, data []byte, depth int) path {
	var obj map[string]json.RawMessage
	if json.Unmarshal(data, &obj) != nil {
		return p
	}
	var url string
	if json.Unmarshal(obj["@type"], &url) != nil {
		return p.field("@type")
	}
	mt, err := protoregistry.GlobalTypes.FindMessageByURL(url)
	if err != nil {
		return p.field("@type")
	}
	md := mt.Descriptor()
	if md.FullName().Parent() == "google.protobuf" {
		return p.field("value")
	}
	delete(obj, "@type")
	rest, _ := json.Marshal(obj)
	return locateProtoError(p, rest, md, depth)
}

// protoAccepts reports whether data decodes as a message md.
func protoAccepts(data []byte, md protoreflect.MessageDescriptor) bool {
	var m proto.Message
	if mt, err := protoregistry.GlobalTypes.FindMessageByName(md.FullName()); err == nil {
		m = mt.New().Interface()
	} else {
		m = dynamicpb.NewMessage(md)
	}
	return strictProto.Unmarshal(data, m) == nil
}
