// Command crossings measures which files a keyed POST crosses in the core: it
// builds ./flow (one keyed POST through the middleware on the memory store,
// then the same POST replayed), runs it under `dlv trace` with a tracepoint on
// every function of the packages measured, maps each function to the file that
// declares it (the binary's line table), and prints, for the first execution
// and for the replay, the files in the order the calls enter them and two
// counts: the files crossed, and the returns (a call entering a file that the
// request already left).
//
// Run it from anywhere in the repository (dlv on PATH or in $GOPATH/bin; go
// install github.com/go-delve/delve/cmd/dlv@latest):
//
//	go run ./internal/tools/crossings
//	go run ./internal/tools/crossings -v   # every call, with its file
package main

import (
	"bufio"
	"bytes"
	"debug/elf"
	"debug/gosym"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
)

// measured are the packages whose functions are traced.
var measured = []string{"middleware", "cache/memstore"}

const module = "github.com/idemproxy/idemproxy/"

func main() {
	verbose := flag.Bool("v", false, "print every call with its file")
	dlv := flag.String("dlv", "", "the dlv binary (default: dlv on PATH, else $GOPATH/bin/dlv)")
	flag.Parse()
	if err := run(*dlv, *verbose); err != nil {
		fmt.Fprintln(os.Stderr, "crossings:", err)
		os.Exit(1)
	}
}

func run(dlv string, verbose bool) error {
	root, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", module[:len(module)-1]).Output()
	if err != nil {
		return fmt.Errorf("finding the root module: %w", err)
	}
	dir := strings.TrimSpace(string(root))
	if dlv == "" {
		if dlv, err = findDlv(); err != nil {
			return err
		}
	}
	tmp, err := os.MkdirTemp("", "crossings")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	bin := filepath.Join(tmp, "flow")
	build := exec.Command("go", "build", "-gcflags=all=-N -l", "-o", bin, "./internal/tools/crossings/flow")
	build.Dir, build.Stderr = dir, os.Stderr
	if err := build.Run(); err != nil {
		return fmt.Errorf("building flow: %w", err)
	}
	files, err := funcFiles(bin, dir)
	if err != nil {
		return err
	}
	pkgs := make([]string, len(measured))
	for i, p := range measured {
		pkgs[i] = regexp.QuoteMeta(module + p)
	}
	pattern := `^main\.phase$|^(` + strings.Join(pkgs, "|") + `)\.`
	var trace bytes.Buffer
	cmd := exec.Command(dlv, "trace", "--exec", bin, pattern)
	cmd.Dir, cmd.Stdout, cmd.Stderr = tmp, &trace, &trace
	if err := cmd.Run(); err != nil {
		os.Stderr.Write(trace.Bytes())
		return fmt.Errorf("dlv trace: %w", err)
	}
	phases, err := parse(&trace)
	if err != nil {
		return err
	}
	for _, name := range []string{"first", "replay"} {
		calls, ok := phases[name]
		if !ok {
			return fmt.Errorf("the trace has no %q request", name)
		}
		report(name, "", calls, files, verbose)
		report(name, "middleware", calls, files, false)
	}
	return nil
}

func findDlv() (string, error) {
	if p, err := exec.LookPath("dlv"); err == nil {
		return p, nil
	}
	gopath, err := exec.Command("go", "env", "GOPATH").Output()
	if err == nil {
		p := filepath.Join(strings.TrimSpace(string(gopath)), "bin", "dlv")
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	return "", fmt.Errorf("no dlv: go install github.com/go-delve/delve/cmd/dlv@latest")
}

// funcFiles maps every function of the measured packages in bin to its file,
// relative to the repository's root dir.
func funcFiles(bin, dir string) (map[string]string, error) {
	f, err := elf.Open(bin)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	text, pcln := f.Section(".text"), f.Section(".gopclntab")
	if text == nil || pcln == nil {
		return nil, fmt.Errorf("%s has no .text or .gopclntab", bin)
	}
	data, err := pcln.Data()
	if err != nil {
		return nil, err
	}
	table, err := gosym.NewTable(nil, gosym.NewLineTable(data, text.Addr))
	if err != nil {
		return nil, err
	}
	files := map[string]string{}
	for _, fn := range table.Funcs {
		if !inMeasured(fn.Name) {
			continue
		}
		file, _, _ := table.PCToLine(fn.Entry)
		if rel, err := filepath.Rel(dir, file); err == nil {
			file = rel
		}
		files[fn.Name] = file
	}
	return files, nil
}

func inMeasured(name string) bool {
	for _, p := range measured {
		if strings.HasPrefix(name, module+p+".") {
			return true
		}
	}
	return false
}

// call is one function entered, on one goroutine.
type call struct {
	goroutine string
	name      string
}

var event = regexp.MustCompile(`^> goroutine\((\d+)\): (.*)$`)

// parse cuts dlv's trace into the requests main.phase marks: the calls made
// between phase(name) and phase("end") on the goroutine that marked them, and
// on any goroutine started meanwhile.
func parse(trace *bytes.Buffer) (map[string][]call, error) {
	phases := map[string][]call{}
	current := ""
	sc := bufio.NewScanner(trace)
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for sc.Scan() {
		m := event.FindStringSubmatch(sc.Text())
		if m == nil {
			continue // a return, or dlv's own output
		}
		name := funcName(m[2])
		if name == "main.phase" {
			arg := strings.Trim(strings.TrimPrefix(m[2], "main.phase"), `()"`)
			if arg == "end" {
				current = ""
			} else {
				current = arg
			}
			continue
		}
		if current != "" {
			phases[current] = append(phases[current], call{m[1], name})
		}
	}
	return phases, sc.Err()
}

// funcName is the function's name in one of dlv's call lines: the text up to
// the parenthesis that opens the arguments (a receiver's parenthesis follows a
// dot).
func funcName(s string) string {
	for i := 1; i < len(s); i++ {
		if s[i] == '(' && s[i-1] != '.' {
			return s[:i]
		}
	}
	return s
}

// report prints the files calls enter, those under the folder only (all of
// them for ""). A wrapper the compiler generated has no file and is left out.
func report(name, only string, calls []call, files map[string]string, verbose bool) {
	var path []string // files in the order calls enter them, repeats collapsed
	seen := map[string]bool{}
	returns, other := 0, map[string]bool{}
	main := ""
	for _, c := range calls {
		if main == "" {
			main = c.goroutine
		}
		if c.goroutine != main {
			other[c.goroutine] = true
		}
		file, ok := files[c.name]
		if !ok {
			file = "?" + c.name
		}
		if file == "<autogenerated>" || only != "" && !strings.HasPrefix(file, only+"/") {
			continue
		}
		if verbose {
			fmt.Printf("%s\tg%s\t%s\t%s\n", name, c.goroutine, file, strings.TrimPrefix(c.name, module))
		}
		if len(path) > 0 && path[len(path)-1] == file {
			continue
		}
		if seen[file] {
			returns++
		}
		seen[file] = true
		path = append(path, file)
	}
	scope := strings.Join(measured, " + ")
	if only != "" {
		scope = only
	}
	fmt.Printf("%s, %s: %d files crossed, %d returns to a file already left", name, scope, len(seen), returns)
	if len(other) > 0 {
		fmt.Printf(" (%d calls on %d other goroutines included)", countOther(calls, main), len(other))
	}
	fmt.Printf("\n  %s\n", strings.Join(path, " → "))
}

func countOther(calls []call, main string) int {
	n := 0
	for _, c := range calls {
		if c.goroutine != main {
			n++
		}
	}
	return n
}
