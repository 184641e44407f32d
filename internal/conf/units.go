package conf

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

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
	if math.Abs(n*24*float64(time.Hour)) > math.MaxInt64 {
		return 0, fmt.Errorf("time: invalid duration %q", s)
	}
	d := time.Duration(n * 24 * float64(time.Hour))
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

// FormatDuration writes d as Go does ("24h0m0s").
func FormatDuration(d time.Duration) string { return d.String() }

var sizeUnits = map[string]float64{
	"b": 1,
	"k": 1e3, "kb": 1e3, "m": 1e6, "mb": 1e6, "g": 1e9, "gb": 1e9, "t": 1e12, "tb": 1e12,
	"ki": 1 << 10, "kib": 1 << 10, "mi": 1 << 20, "mib": 1 << 20, "gi": 1 << 30, "gib": 1 << 30, "ti": 1 << 40, "tib": 1 << 40,
}

// ParseSize parses a size: a number with a unit, which is required: B; KB, MB,
// GB, TB (powers of 1000, also K, M, G, T); KiB, MiB, GiB, TiB (powers of 1024,
// also Ki, Mi, Gi, Ti). Units are case-insensitive; the number may have a
// fraction ("1.5MiB"). This is Caddy's grammar: "10M" is 10,000,000 bytes and
// "10MiB" is 10,485,760. It is the one size parser of every surface.
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

// FormatSize writes n bytes with the largest binary unit that divides it
// ("10MiB"), else in bytes ("1000B").
func FormatSize(n int64) string {
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
