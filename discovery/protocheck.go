package discovery

import (
	"errors"
	"strings"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// rejectUnsupported returns an error naming the first set field of m (in
// declaration order) that is not among handled. The translators list what
// they read, so a field meshlet does not implement, including fields added
// to Envoy's API later, is an error rather than silently ignored.
func rejectUnsupported(p path, m proto.Message, handled ...string) error {
	r := m.ProtoReflect()
	if !r.IsValid() {
		return nil
	}
	fields := r.Descriptor().Fields()
	for i := range fields.Len() {
		fd := fields.Get(i)
		if !r.Has(fd) {
			continue
		}
		name := string(fd.Name())
		if !containsString(handled, name) {
			return p.field(name).errorf("not supported by meshlet")
		}
	}
	return nil
}

func containsString(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// pgvError is what protoc-gen-validate's generated errors implement: the
// Go name of the failing field (with "[i]" or "[key]" for list and map
// entries), why, and for an embedded message the inner message's error.
type pgvError interface {
	error
	Field() string
	Reason() string
	Cause() error
}

// validateProto runs the protoc-gen-validate rules Envoy enforces on m (the
// generated Validate method) and turns the first violation into an error
// whose path uses proto field names.
func validateProto(p path, m interface {
	proto.Message
	Validate() error
}) error {
	err := m.Validate()
	if err == nil {
		return nil
	}
	md := m.ProtoReflect().Descriptor()
	for {
		var ve pgvError
		if !errors.As(err, &ve) {
			return p.wrap(err)
		}
		goName, sub, _ := strings.Cut(ve.Field(), "[")
		fd := fieldByGoName(md, goName)
		if fd == nil {
			if od := oneofByGoName(md, goName); od != nil {
				return p.field(string(od.Name())).errorf("%s (one of %s)", ve.Reason(), oneofFields(od))
			}
			return p.errorf("%s: %s", ve.Field(), ve.Reason())
		}
		p = p.field(string(fd.Name()))
		if sub != "" {
			p += path("[" + sub)
		}
		next := fd.Message()
		if fd.IsMap() {
			next = fd.MapValue().Message()
		}
		if ve.Cause() == nil || next == nil {
			return p.errorf("%s", ve.Reason())
		}
		md, err = next, ve.Cause()
	}
}

// fieldByGoName finds the field whose generated Go name is goName
// ("Consecutive_5Xx" for consecutive_5xx): the two agree once case and
// underscores are dropped.
func fieldByGoName(md protoreflect.MessageDescriptor, goName string) protoreflect.FieldDescriptor {
	want := foldName(goName)
	fields := md.Fields()
	for i := range fields.Len() {
		if foldName(string(fields.Get(i).Name())) == want {
			return fields.Get(i)
		}
	}
	return nil
}

// oneofByGoName finds the oneof whose generated Go name is goName.
func oneofByGoName(md protoreflect.MessageDescriptor, goName string) protoreflect.OneofDescriptor {
	want := foldName(goName)
	oneofs := md.Oneofs()
	for i := range oneofs.Len() {
		if foldName(string(oneofs.Get(i).Name())) == want {
			return oneofs.Get(i)
		}
	}
	return nil
}

// oneofFields lists a oneof's members for error messages.
func oneofFields(od protoreflect.OneofDescriptor) string {
	names := make([]string, od.Fields().Len())
	for i := range names {
		names[i] = string(od.Fields().Get(i).Name())
	}
	return strings.Join(names, ", ")
}

func foldName(s string) string { return strings.ToLower(strings.ReplaceAll(s, "_", "")) }

// protoDuration converts a set Duration; errors name p.
func protoDuration(p path, d *durationpb.Duration) (time.Duration, error) {
	if err := d.CheckValid(); err != nil {
		return 0, p.errorf("%v", err)
	}
	return d.AsDuration(), nil
}

// positiveDuration is duration for fields Envoy requires to be > 0.
func positiveDuration(p path, d *durationpb.Duration) (time.Duration, error) {
	v, err := protoDuration(p, d)
	if err == nil && v <= 0 {
		err = p.errorf("%v must be > 0", v)
	}
	return v, err
}

// optDuration returns def when d is unset, else d, which must be >= 0.
func optDuration(p path, d *durationpb.Duration, def time.Duration) (time.Duration, error) {
	if d == nil {
		return def, nil
	}
	v, err := protoDuration(p, d)
	if err == nil && v < 0 {
		err = p.errorf("%v must be >= 0", v)
	}
	return v, err
}

// u32 returns w's value, or def when w is unset.
func u32(w *wrapperspb.UInt32Value, def uint32) uint32 {
	if w == nil {
		return def
	}
	return w.GetValue()
}

// u64 returns w's value, or def when w is unset.
func u64(w *wrapperspb.UInt64Value, def uint64) uint64 {
	if w == nil {
		return def
	}
	return w.GetValue()
}

// boolOr returns w's value, or def when w is unset.
func boolOr(w *wrapperspb.BoolValue, def bool) bool {
	if w == nil {
		return def
	}
	return w.GetValue()
}
