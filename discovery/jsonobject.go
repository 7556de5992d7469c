package discovery

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
)

// object is one JSON object of meshlet's own config sections, decoded field
// by field so that an unknown key or a bad value is reported at its path.
type object struct {
	p      path
	fields map[string]json.RawMessage
}

// decodeObject parses data as an object at p whose keys must be among
// known. null is an empty object.
func decodeObject(p path, data json.RawMessage, known ...string) (*object, error) {
	o := &object{p: p}
	if isNull(data) {
		return o, nil
	}
	if err := json.Unmarshal(data, &o.fields); err != nil {
		return nil, p.errorf("want an object, got %s", jsonKind(data))
	}
	var unknown []string
	for k := range o.fields {
		if !slices.Contains(known, k) {
			unknown = append(unknown, k)
		}
	}
	if len(unknown) > 0 {
		slices.Sort(unknown)
		return nil, p.field(unknown[0]).errorf("unknown field (want one of %s)", strings.Join(known, ", "))
	}
	return o, nil
}

// has reports whether the key is present and not null.
func (o *object) has(key string) bool {
	raw, ok := o.fields[key]
	return ok && !isNull(raw)
}

// raw returns the key's JSON (nil when absent).
func (o *object) raw(key string) json.RawMessage { return o.fields[key] }

// get decodes the key into v when it is present and not null, leaving v
// unchanged otherwise.
func (o *object) get(key string, v any) error {
	if !o.has(key) {
		return nil
	}
	if err := json.Unmarshal(o.fields[key], v); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) {
			return o.p.field(key).errorf("want %s, got %s%s", typeName(te.Type.String()), te.Value, yamlHint(te.Value))
		}
		var fe *fieldError
		if errors.As(err, &fe) {
			return o.p.field(key).wrap(fe)
		}
		return o.p.field(key).wrap(err)
	}
	return nil
}

// list decodes the key as a JSON array of raw elements.
func (o *object) list(key string) ([]json.RawMessage, error) {
	var l []json.RawMessage
	if !o.has(key) {
		return nil, nil
	}
	if err := json.Unmarshal(o.fields[key], &l); err != nil {
		return nil, o.p.field(key).errorf("want a list, got %s", jsonKind(o.fields[key]))
	}
	return l, nil
}

func isNull(data []byte) bool {
	d := bytes.TrimSpace(data)
	return len(d) == 0 || string(d) == "null"
}

// jsonKind names the JSON type of data for error messages.
func jsonKind(data []byte) string {
	d := bytes.TrimSpace(data)
	if len(d) == 0 {
		return "nothing"
	}
	switch d[0] {
	case '{':
		return "an object"
	case '[':
		return "a list"
	case '"':
		return "a string"
	case 't', 'f':
		return "a bool" + yamlHint("bool")
	case 'n':
		return "null"
	}
	return "a number"
}

// yamlHint explains the YAML 1.1 surprise behind most unexpected bools.
func yamlHint(kind string) string {
	if kind == "bool" {
		return " (quote YAML words such as on, off, yes, no, y, n)"
	}
	return ""
}

// typeName renders a Go type for people editing YAML.
func typeName(t string) string {
	switch {
	case t == "string", t == "discovery.duration":
		return "a string"
	case strings.HasPrefix(t, "[]"):
		return "a list"
	case strings.HasPrefix(t, "uint"):
		return "a non-negative integer of " + strings.TrimPrefix(t, "uint") + " bits"
	case strings.HasPrefix(t, "int"), strings.HasPrefix(t, "float"):
		return "a number"
	case t == "bool":
		return "a bool"
	}
	return t
}

// duration is a Go duration string in meshlet's own sections ("100ms",
// "1.5s", "0s").
type duration time.Duration

// UnmarshalJSON accepts a Go duration string.
func (d *duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("want a duration string such as \"100ms\" or \"1.5s\", got %s", jsonKind(b))
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("%q is not a duration (want Go syntax such as \"100ms\" or \"1.5s\")", s)
	}
	*d = duration(v)
	return nil
}

// switchable is a string that YAML may switch off: a bare YAML off
// arrives as false, which is recorded as off.
type switchable struct {
	value string
	off   bool // false, or the string "off"
}

// UnmarshalJSON accepts a string or false.
func (s *switchable) UnmarshalJSON(b []byte) error {
	var v string
	if err := json.Unmarshal(b, &v); err == nil {
		s.value, s.off = v, v == "off"
		return nil
	}
	var on bool
	if err := json.Unmarshal(b, &on); err == nil && !on {
		s.value, s.off = "off", true
		return nil
	}
	return fmt.Errorf("want a string or off, got %s", jsonKind(b))
}
