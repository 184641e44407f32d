// Command modproxy writes one module version into a module proxy directory,
// in the layout the go command reads from a GOPROXY of the form file://DIR
// (the GOPROXY protocol of the Go module reference):
//
//	DIR/MODULE/@v/list            the versions, one a line
//	DIR/MODULE/@v/VERSION.info    {"Version": …, "Time": …}
//	DIR/MODULE/@v/VERSION.mod     the module's go.mod
//	DIR/MODULE/@v/VERSION.zip     the module's files, made with golang.org/x/mod/zip
//
// MODULE is escaped as the go command escapes module paths (upper case as
// "!" and the lower-case letter). The zip holds what a published module holds:
// the files under the module's directory, less nested modules, vendor
// directories and files the zip format refuses (CreateFromDir's rules).
//
//	modproxy -dir DIR -version v0.1.0 -module-dir cache/pgstore
//
// .ci/release runs it for each module of a release rehearsal.
package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"golang.org/x/mod/modfile"
	"golang.org/x/mod/module"
	"golang.org/x/mod/semver"
	modzip "golang.org/x/mod/zip"
)

func main() {
	dir := flag.String("dir", "", "the module proxy directory to write into (made if missing)")
	version := flag.String("version", "", "the version to publish, a semantic version such as v0.1.0")
	modDir := flag.String("module-dir", ".", "the module's directory (its go.mod names the module)")
	flag.Parse()
	if err := publish(*dir, *version, *modDir, time.Now().UTC()); err != nil {
		fmt.Fprintln(os.Stderr, "modproxy:", err)
		os.Exit(1)
	}
}

// publish writes the module in modDir at version into the proxy directory dir.
func publish(dir, version, modDir string, now time.Time) error {
	if dir == "" {
		return errors.New("-dir is required")
	}
	if !semver.IsValid(version) || semver.Canonical(version) != version {
		return fmt.Errorf("-version %q is not a canonical semantic version (v0.1.0)", version)
	}
	gomod, err := os.ReadFile(filepath.Join(modDir, "go.mod"))
	if err != nil {
		return err
	}
	f, err := modfile.ParseLax("go.mod", gomod, nil)
	if err != nil {
		return err
	}
	if f.Module == nil {
		return fmt.Errorf("%s/go.mod names no module", modDir)
	}
	if len(f.Replace) > 0 {
		return fmt.Errorf("%s/go.mod has %d replace directives: a published module has none", modDir, len(f.Replace))
	}
	mv := module.Version{Path: f.Module.Mod.Path, Version: version}
	if err := module.Check(mv.Path, mv.Version); err != nil {
		return err
	}
	escaped, err := module.EscapePath(mv.Path)
	if err != nil {
		return err
	}
	at := filepath.Join(dir, filepath.FromSlash(escaped), "@v")
	if err := os.MkdirAll(at, 0o755); err != nil {
		return err
	}
	var zip bytes.Buffer
	if err := modzip.CreateFromDir(&zip, mv, modDir); err != nil {
		return fmt.Errorf("zipping %s: %w", mv.Path, err)
	}
	info, err := json.Marshal(struct {
		Version string
		Time    string
	}{version, now.Format(time.RFC3339)})
	if err != nil {
		return err
	}
	for name, data := range map[string][]byte{
		version + ".zip":  zip.Bytes(),
		version + ".mod":  gomod,
		version + ".info": info,
	} {
		if err := os.WriteFile(filepath.Join(at, name), data, 0o644); err != nil {
			return err
		}
	}
	return addToList(filepath.Join(at, "list"), version)
}

// addToList adds version to the proxy's list file, once, in semver order.
func addToList(path, version string) error {
	old, err := os.ReadFile(path)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	versions := strings.Fields(string(old))
	if !slices.Contains(versions, version) {
		versions = append(versions, version)
	}
	semver.Sort(versions)
	return os.WriteFile(path, []byte(strings.Join(versions, "\n")+"\n"), 0o644)
}
