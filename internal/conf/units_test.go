package conf_test

import (
	"strings"
	"testing"
	"time"

	"github.com/idemproxy/idemproxy/internal/conf"
)

// ParseDuration is Go's syntax with an optional leading day count.
func TestParseDuration(t *testing.T) {
	for in, want := range map[string]time.Duration{
		"30s":      30 * time.Second,
		"500ms":    500 * time.Millisecond,
		"1h30m":    90 * time.Minute,
		"0":        0,
		"2d":       48 * time.Hour,
		" 2d ":     48 * time.Hour,
		"1.5d":     36 * time.Hour,
		"0.5d":     12 * time.Hour,
		"1d12h":    36 * time.Hour,
		"1d30m15s": 24*time.Hour + 30*time.Minute + 15*time.Second,
		"0d":       0,
		"0d1s":     time.Second,
		"-1d":      -24 * time.Hour,
		"-1d12h":   -36 * time.Hour, // the sign covers the whole duration, as Go's does
		"-0d12h":   -12 * time.Hour,
		"-1h":      -time.Hour,
		"+1d":      24 * time.Hour,
		"365d":     365 * 24 * time.Hour,
		"106751d":  106751 * 24 * time.Hour, // the largest whole day count
		"1d0.5h":   24*time.Hour + 30*time.Minute,
	} {
		got, err := conf.ParseDuration(in)
		if err != nil || got != want {
			t.Errorf("ParseDuration(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{
		"", "d", "x", "xd", "1x", "30", "1d12", "1dx", "1d-1h", "1d+1h", "1d2d", "d1h",
		"1e3d", "1E3d", "infd", "Infd", "NaNd", "0x10d",
		"106752d",                // past the largest duration
		"99999999999999999999d",  // far past it
		"-99999999999999999999d", // and below the smallest
		"1d 2h",
	} {
		if d, err := conf.ParseDuration(in); err == nil {
			t.Errorf("ParseDuration(%q) = %v, want an error", in, d)
		} else if !strings.Contains(err.Error(), "invalid duration") && !strings.Contains(err.Error(), "unknown unit") && !strings.Contains(err.Error(), "missing unit") {
			t.Errorf("ParseDuration(%q): %v, want time's invalid-duration error", in, err)
		}
	}
}

func TestFormatDuration(t *testing.T) {
	for d, want := range map[time.Duration]string{0: "0s", 24 * time.Hour: "24h0m0s", 1500 * time.Millisecond: "1.5s"} {
		if got := conf.FormatDuration(d); got != want {
			t.Errorf("FormatDuration(%v) = %q, want %q", d, got, want)
		}
		if back, err := conf.ParseDuration(conf.FormatDuration(d)); err != nil || back != d {
			t.Errorf("ParseDuration(FormatDuration(%v)) = %v, %v", d, back, err)
		}
	}
}

// ParseSize is Caddy's grammar: a number and a unit, which is required;
// KB, MB, GB, TB (and K, M, G, T) are powers of 1000, KiB… TiB powers of 1024,
// any case, with a fraction or a space before the unit.
func TestParseSize(t *testing.T) {
	for in, want := range map[string]int64{
		"0B":         0,
		"512B":       512,
		"512b":       512,
		"1KB":        1000,
		"1k":         1000,
		"8K":         8000,
		"10M":        10_000_000,
		"10MB":       10_000_000,
		"10mb":       10_000_000,
		"2G":         2_000_000_000,
		"2GB":        2_000_000_000,
		"1T":         1_000_000_000_000,
		"1TB":        1_000_000_000_000,
		"1KiB":       1024,
		"64KiB":      65_536,
		"64ki":       65_536,
		"10MiB":      10 << 20,
		"10Mi":       10 << 20,
		"1.5MiB":     1_572_864,
		"2gib":       2 << 30,
		"2Gi":        2 << 30,
		"1TiB":       1 << 40,
		"1ti":        1 << 40,
		"1 MB":       1_000_000,
		" 64KiB ":    65_536,
		"0.5KiB":     512,
		".5KiB":      512,
		"1.KiB":      1024,
		"1000B":      1000,
		"4096TiB":    4096 << 40,
		"4194303TiB": 4194303 << 40, // the largest TiB count below 2^62 bytes
	} {
		got, err := conf.ParseSize(in)
		if err != nil || got != want {
			t.Errorf("ParseSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for in, want := range map[string]string{
		"":                      "is not a size",
		"x":                     "is not a size",
		"MiB":                   "is not a size",
		"-1B":                   "is not a size",
		"-1MiB":                 "is not a size",
		".":                     "is not a size",
		"1.2.3B":                "is not a size",
		"1000":                  `"1000" has no unit: write 1000B for bytes, or use KiB, MiB, GiB (or KB, MB, GB)`,
		"0":                     "has no unit",
		" 12 ":                  "has no unit",
		"10XB":                  `"10XB": unknown unit "XB" (B, KB, MB, GB, TB, KiB, MiB, GiB, TiB)`,
		"10MiBs":                "unknown unit",
		"10 M B":                "unknown unit",
		"1e3B":                  "unknown unit",
		"99999999999999999999B": "is too large",
		"4194304TiB":            "is too large", // 2^62 bytes
		"8EB":                   "unknown unit",
	} {
		n, err := conf.ParseSize(in)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseSize(%q) = %d, %v; want an error containing %q", in, n, err, want)
		}
	}
}

// FormatSize writes the largest binary unit that divides the size, else bytes;
// ParseSize reads every one back.
func TestFormatSize(t *testing.T) {
	for n, want := range map[int64]string{
		0:                     "0B",
		1:                     "1B",
		1000:                  "1000B",
		1023:                  "1023B",
		1024:                  "1KiB",
		1536:                  "1536B",
		10_000_000:            "10000000B",
		10 << 20:              "10MiB",
		(10 << 20) + 1024:     "10241KiB",
		3 << 30:               "3GiB",
		1 << 40:               "1TiB",
		2048 << 40:            "2048TiB",
		(1 << 40) + (1 << 30): "1025GiB",
		(1 << 62) - (1 << 40): "4194303TiB",
		(1 << 62) - 1:         "4611686018427387903B",
	} {
		if got := conf.FormatSize(n); got != want {
			t.Errorf("FormatSize(%d) = %q, want %q", n, got, want)
		}
		back, err := conf.ParseSize(conf.FormatSize(n))
		if n < 1<<53 && (err != nil || back != n) { // exact while the float holds it
			t.Errorf("ParseSize(FormatSize(%d)) = %d, %v", n, back, err)
		}
	}
}
