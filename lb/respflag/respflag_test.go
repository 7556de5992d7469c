package respflag

import (
	"strings"
	"testing"
)

func TestResponseFlagBits(t *testing.T) {
	// Bit i is Envoy's flag number i; spot-check the old enum's masks.
	for i, n := range Names() {
		if n.Flag != Flags(1)<<i {
			t.Errorf("table row %d (%s) has bit %#x, want %#x", i, n.Short, uint64(n.Flag), uint64(1)<<i)
		}
	}
	for f, want := range map[Flags]uint64{LH: 0x1, UH: 0x2, UF: 0x20, UO: 0x80, URX: 0x8000, DT: 0x400000, DO: 0x8000000, UDO: 0x20000000} {
		if uint64(f) != want {
			t.Errorf("%s = %#x, want %#x", f.Short(), uint64(f), want)
		}
	}
	if n := len(Names()); n != 30 {
		t.Errorf("%d flags, want 30", n)
	}
}

func TestResponseFlagsRendering(t *testing.T) {
	tests := []struct {
		f           Flags
		short, long string
	}{
		{0, "-", "-"},
		{1 << 40, "-", "-"}, // bits beyond the table are ignored
		{UH, "UH", "NoHealthyUpstream"},
		// Fixed table order, whatever order the flags were set in.
		{URX | UF, "UF,URX", "UpstreamConnectionFailure,UpstreamRetryLimitExceeded"},
		{UO | UH | LH, "LH,UH,UO", "FailedLocalHealthCheck,NoHealthyUpstream,UpstreamOverflow"},
		{UDO | DC | 1<<40, "DC,UDO", "DownstreamConnectionTermination,UnconditionalDropOverload"},
	}
	for _, tt := range tests {
		if got := tt.f.Short(); got != tt.short {
			t.Errorf("%#x.Short() = %q, want %q", uint64(tt.f), got, tt.short)
		}
		if got := tt.f.Long(); got != tt.long {
			t.Errorf("%#x.Long() = %q, want %q", uint64(tt.f), got, tt.long)
		}
		if got := tt.f.String(); got != tt.short {
			t.Errorf("%#x.String() = %q, want %q", uint64(tt.f), got, tt.short)
		}
		if got := string(tt.f.AppendShort([]byte("x="))); got != "x="+tt.short {
			t.Errorf("%#x.AppendShort(x=) = %q", uint64(tt.f), got)
		}
	}
	var all Flags
	var shorts []string
	for _, n := range Names() {
		all |= n.Flag
		shorts = append(shorts, n.Short)
	}
	if got, want := all.Short(), strings.Join(shorts, ","); got != want {
		t.Errorf("all flags render %q, want %q", got, want)
	}
	if !strings.HasPrefix(all.Short(), "LH,UH,UT,LR,UR,UF,UC,UO,NR,DI,FI,RL,UAEX,RLSE,DC,URX,SI,IH,DPE,UMSDR,RFCF,NFCF,DT,UPE,NC,OM,DF,DO,") {
		t.Errorf("table order differs from Envoy's older fixed order: %s", all.Short())
	}
}

func TestParseResponseFlags(t *testing.T) {
	for _, n := range Names() {
		f, err := Lookup(n.Short)
		if err != nil || f != n.Flag {
			t.Errorf("Lookup(%q) = %v, %v", n.Short, f, err)
		}
	}
	for _, bad := range []string{"uf", "", "UF,URX", "NoHealthyUpstream"} {
		if _, err := Lookup(bad); err == nil {
			t.Errorf("Lookup(%q): want error", bad)
		}
	}
	if _, err := Lookup("XX"); err == nil || err.Error() != `respflag: unknown response flag "XX"` {
		t.Errorf("Lookup(XX) error = %v", err)
	}
	tests := []struct {
		in   string
		want Flags
		ok   bool
	}{
		{"-", 0, true},
		{"UF", UF, true},
		{"UF,URX", UF | URX, true},
		{"URX,UF", UF | URX, true},
		{"UF,XX", 0, false},
		{"UF,-", 0, false},
	}
	for _, tt := range tests {
		got, err := Parse(tt.in)
		if got != tt.want || (err == nil) != tt.ok {
			t.Errorf("Parse(%q) = %v, %v; want %v ok=%v", tt.in, got, err, tt.want, tt.ok)
		}
	}
	// Every rendering parses back.
	for f := Flags(1); f < 1<<30; f = f*3 + 1 {
		if got, err := Parse(f.Short()); err != nil || got != f&(1<<30-1) {
			t.Errorf("round trip %#x: %v, %v", uint64(f), got, err)
		}
	}
}

func TestResponseFlagNamesIsACopy(t *testing.T) {
	names := Names()
	names[0].Short = "ZZ"
	if LH.Short() != "LH" {
		t.Error("mutating Names changed the table")
	}
}

func TestAppendShortDoesNotAllocate(t *testing.T) {
	buf := make([]byte, 0, 64)
	f := UF | URX | UO
	if a := testing.AllocsPerRun(100, func() { buf = f.AppendShort(buf[:0]) }); a != 0 {
		t.Errorf("AppendShort allocates %v times", a)
	}
}
