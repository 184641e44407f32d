package middleware

import (
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// Duration is a time.Duration in every configuration surface: Go syntax ("30s",
// "1h30m") plus days ("2d", "1d12h"). Never negative. In JSON a number is
// nanoseconds, as in Caddy's JSON.
type Duration time.Duration

// ParseDuration parses Go duration syntax with an optional leading day count
// ("2d", "1d12h"). It is the one duration parser of every surface.
func ParseDuration(s string) (time.Duration, error) {
	t := strings.TrimSpace(s)
	days, rest, hasDays := strings.Cut(t, "d")
	if !hasDays {
		return time.ParseDuration(t)
	}
	n, err := strconv.ParseFloat(days, 64)
	if err != nil || strings.ContainsAny(days, "eEinfINF") {
		return 0, fmt.Errorf("time: invalid duration %q", s)
	}
	d := time.Duration(n * 24 * float64(time.Hour))
	if math.Abs(n*24*float64(time.Hour)) > math.MaxInt64 {
		return 0, fmt.Errorf("time: invalid duration %q", s)
	}
	if rest == "" {
		return d, nil
	}
	r, err := time.ParseDuration(rest)
	if err != nil || strings.HasPrefix(rest, "-") || strings.HasPrefix(rest, "+") {
		return 0, fmt.Errorf("time: invalid duration %q", s)
	}
	if n < 0 || strings.HasPrefix(days, "-") {
		return d - r, nil
	}
	return d + r, nil
}

// Set parses s (flag.Value).
func (d *Duration) Set(s string) error {
	v, err := ParseDuration(s)
	if err != nil {
		return fmt.Errorf("%q is not a duration (e.g. 500ms, 30s, 24h, 2d)", s)
	}
	if v < 0 {
		return fmt.Errorf("%q: must not be negative", s)
	}
	*d = Duration(v)
	return nil
}

func (d Duration) String() string { return time.Duration(d).String() }

// Std returns d as a time.Duration.
func (d Duration) Std() time.Duration { return time.Duration(d) }

// MarshalJSON writes d as a string ("30s").
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(d.String()) }

// UnmarshalJSON reads a string, or a number of nanoseconds.
func (d *Duration) UnmarshalJSON(b []byte) error {
	if len(b) > 0 && b[0] != '"' {
		var n int64
		if err := json.Unmarshal(b, &n); err != nil {
			return fmt.Errorf("%s is not a duration", b)
		}
		if n < 0 {
			return fmt.Errorf("%d: must not be negative", n)
		}
		*d = Duration(n)
		return nil
	}
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return err
	}
	return d.Set(s)
}

// MarshalText writes d as text (YAML).
func (d Duration) MarshalText() ([]byte, error) { return []byte(d.String()), nil }

// UnmarshalText reads d from text (YAML).
func (d *Duration) UnmarshalText(b []byte) error { return d.Set(string(b)) }

// Size is a byte count in every configuration surface. Its text form is a number
// with a unit, which is required: B; KB, MB, GB, TB (powers of 1000, also written K,
// M, G, T); KiB, MiB, GiB, TiB (powers of 1024, also Ki, Mi, Gi, Ti). Units are
// case-insensitive; the number may have a fraction ("1.5MiB"). This is Caddy's
// grammar: "10M" is 10,000,000 bytes and "10MiB" is 10,485,760. In JSON a number
// is bytes.
type Size int64

var sizeUnits = map[string]float64{
	"b": 1,
	"k": 1e3, "kb": 1e3, "m": 1e6, "mb": 1e6, "g": 1e9, "gb": 1e9, "t": 1e12, "tb": 1e12,
	"ki": 1 << 10, "kib": 1 << 10, "mi": 1 << 20, "mib": 1 << 20, "gi": 1 << 30, "gib": 1 << 30, "ti": 1 << 40, "tib": 1 << 40,
}

// ParseSize parses a size ("10MiB", "1.5GB", "512B"). It is the one size parser
// of every surface.
func ParseSize(s string) (int64, error) {
	t := strings.TrimSpace(s)
	i := 0
	for i < len(t) && (t[i] >= '0' && t[i] <= '9' || t[i] == '.') {
		i++
	}
	num, unit := t[:i], strings.ToLower(strings.TrimSpace(t[i:]))
	n, err := strconv.ParseFloat(num, 64)
	if num == "" || err != nil {
		return 0, fmt.Errorf("%q is not a size (a number and a unit: 512B, 64KiB, 10MiB, 10MB, 1.5GiB)", s)
	}
	if unit == "" {
		return 0, fmt.Errorf("%q has no unit: write %sB for bytes, or use KiB, MiB, GiB (or KB, MB, GB)", s, num)
	}
	mult, ok := sizeUnits[unit]
	if !ok {
		return 0, fmt.Errorf("%q: unknown unit %q (B, KB, MB, GB, TB, KiB, MiB, GiB, TiB)", s, t[i:])
	}
	v := n * mult
	if v >= 1<<62 {
		return 0, fmt.Errorf("%q is too large", s)
	}
	return int64(v), nil
}

// Set parses s (flag.Value).
func (z *Size) Set(s string) error {
	n, err := ParseSize(s)
	if err != nil {
		return err
	}
	*z = Size(n)
	return nil
}

// String writes the size with the largest binary unit that divides it ("10MiB"),
// else in bytes ("1000B").
func (z Size) String() string {
	n := int64(z)
	for _, u := range []struct {
		name string
		mult int64
	}{{"TiB", 1 << 40}, {"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}} {
		if n != 0 && n%u.mult == 0 {
			return strconv.FormatInt(n/u.mult, 10) + u.name
		}
	}
	return strconv.FormatInt(n, 10) + "B"
}

// MarshalJSON writes the size as a number of bytes.
func (z Size) MarshalJSON() ([]byte, error) { return strconv.AppendInt(nil, int64(z), 10), nil }

// UnmarshalJSON reads a number of bytes, or a string with a unit.
func (z *Size) UnmarshalJSON(b []byte) error {
	if len(b) > 0 && b[0] != '"' {
		var n int64
		if err := json.Unmarshal(b, &n); err != nil || n < 0 {
			return fmt.Errorf("%s is not a size in bytes", b)
		}
		*z = Size(n)
		return nil
	}
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return err
	}
	return z.Set(s)
}

// MarshalText writes the size as text (YAML).
func (z Size) MarshalText() ([]byte, error) { return []byte(z.String()), nil }

// UnmarshalText reads the size from text (YAML).
func (z *Size) UnmarshalText(b []byte) error { return z.Set(string(b)) }
