package main

import (
	"fmt"
	"reflect"
	"strings"

	"github.com/idemproxy/idemproxy/internal/conf"
	"github.com/idemproxy/idemproxy/proxy"
)

// The cells record the first error in m.err (fail) and the tables return it,
// so that a bad tag names its setting and nothing is written.

// coreTable is the table of the core's settings: those of the Caddy handler,
// which every surface has, then the Go-only fields of the core.
func (m *model) coreTable() (string, error) {
	t := [][]string{{"setting (file, Caddyfile, JSON)", "proxy flag, variable", "Go", "default", "what it does"}}
	for _, f := range m.core {
		pf, _ := conf.Lookup(m.proxy, f.Name)
		t = append(t, m.settingRow(pf, false))
	}
	for _, g := range m.coreGo {
		t = append(t, m.goRow(g, false))
	}
	return table(t), m.err
}

// proxyTable is the table of the proxy's own settings and the stores': the
// proxy's that are not the core's, the Caddy handler's own JSON members that
// the proxy has no setting for, and the Go-only fields reached from them.
func (m *model) proxyTable() (string, error) {
	t := [][]string{{"setting (file)", "proxy flag, variable", "Caddy", "Go", "default", "what it does"}}
	for _, f := range m.proxy {
		if !m.isCore[f.Name] {
			t = append(t, m.settingRow(f, true))
		}
	}
	for _, mb := range m.members {
		if _, ok := conf.Lookup(m.proxy, mb.name); !ok {
			tag, what := mb.field.Tag, "Caddy's "+mb.name
			t = append(t, []string{"—", "—", m.tagCell(what, tag, "caddy", "`"+mb.name+" …`"), m.tagCell(what, tag, "go", "—"),
				m.tagCell(what, tag, "default", "none"), escape(m.docComment(handlerType, mb.field.Name))})
		}
	}
	for _, g := range m.proxyGo {
		t = append(t, m.goRow(g, true))
	}
	return table(t), m.err
}

// settingRow is the row of setting f of the proxy (withCaddy: with the Caddy
// column, for a setting that is not a subdirective).
func (m *model) settingRow(f conf.Field, withCaddy bool) []string {
	row := []string{"`" + f.Name + "`", "`--" + f.FlagName() + "`, `" + f.EnvName(proxy.EnvPrefix) + "`"}
	if withCaddy {
		row = append(row, m.caddyCell(f))
	}
	def := m.defaultCell(f)
	key := conf.HelpKey(f.Owner, f.StructField.Name)
	if stated, want := m.stated[key], strings.ReplaceAll(def, "`", ""); stated != want {
		m.fail(fmt.Errorf("%s: the doc comment of %s ends in %q, the default is %s: its last paragraph says \"Default: %s.\"",
			f.Name, goName(f.Owner, f.StructField.Name), "Default: "+stated+".", want, want))
	}
	return append(row, m.goCell(f), def, m.cell(f.Name+": help", f.Help))
}

// goRow is the row of a Go-only field: its description is its doc comment,
// Go being where it is set and read.
func (m *model) goRow(g goField, withCaddy bool) []string {
	row := []string{"—", "—"}
	if withCaddy {
		row = append(row, "—")
	}
	what := goName(g.owner, g.field.Name)
	return append(row, "`"+what+"`", m.tagCell(what, g.field.Tag, "default", "none"), escape(m.docComment(g.owner, g.field.Name)))
}

// goCell is what a Go user sets: the field's go tag; else, inside a prefixed
// struct tagged go:"pkg.Type", that type's field of the same name; else, for a
// store's setting, the field of the same name of its package's Options (what
// New takes), when it has one; else the field itself, when a Go user has the
// type that declares it.
func (m *model) goCell(f conf.Field) string {
	if v, ok := f.StructField.Tag.Lookup("go"); ok {
		return m.cell(f.Name+": go tag", v)
	}
	if v, ok := f.Tag("go"); ok {
		return "`" + v + "." + f.StructField.Name + "`"
	}
	if _, _, ok := m.moduleOf(f); ok {
		pkg := f.Owner.PkgPath()
		has, err := m.hasField(pkg, "Options", f.StructField.Name)
		if err != nil {
			m.fail(fmt.Errorf("%s: %w", f.Name, err))
		}
		if has {
			return "`" + pkg[strings.LastIndex(pkg, "/")+1:] + ".Options." + f.StructField.Name + "`"
		}
	}
	if f.Owner == proxyType || f.Owner == handlerType || strings.Contains(f.Owner.PkgPath(), "/internal/") {
		return "—"
	}
	return "`" + goName(f.Owner, f.StructField.Name) + "`"
}

// goName names a field as a Go user writes it: a field of middleware.Settings
// by its name, any other as package.Type.Field.
func goName(owner reflect.Type, field string) string {
	if owner == settingsType {
		return field
	}
	return owner.String() + "." + field
}

// caddyCell is how Caddy sets what proxy setting f sets: the caddy tag, in
// parentheses (what stands for it in Caddy); else a store module's setting in
// its Caddyfile block, or the handler's JSON member of the same name (store:
// its modules).
func (m *model) caddyCell(f conf.Field) string {
	if v, ok := f.StructField.Tag.Lookup("caddy"); ok {
		return "(" + m.cell(f.Name+": caddy tag", v) + ")"
	}
	if sm, g, ok := m.moduleOf(f); ok {
		return "`store " + sm.name + locators(sm) + " { " + g.Name + " }`"
	}
	for _, mb := range m.members {
		if mb.name != f.Name || mb.namespace == "" {
			continue
		}
		var alts []string
		url := false
		for _, sm := range m.modules {
			alts = append(alts, sm.name+locators(sm))
			url = url || strings.Contains(locators(sm), "<url>")
		}
		if url {
			alts = append(alts, "<url>")
		}
		return "`" + mb.name + " " + escape(strings.Join(alts, " | ")) + "`"
	}
	if strings.HasPrefix(f.Needs, "store=") {
		m.fail(fmt.Errorf("%s: a store's setting that no Caddy store module has (does the generator still find the store modules?)", f.Name))
	}
	return "—"
}

func locators(sm storeModule) string {
	var b strings.Builder
	for _, l := range sm.locators {
		b.WriteString(" <" + l + ">")
	}
	return b.String()
}

// defaultCell is the setting's default: its default tag, or the text of its
// value in the proxy's default configuration ("none" when empty).
func (m *model) defaultCell(f conf.Field) string {
	if v, ok := f.StructField.Tag.Lookup("default"); ok {
		return m.cell(f.Name+": default tag", v)
	}
	text := f.Text(&m.proxyDef)
	switch {
	case text == "":
		return "none"
	case f.Duration():
		d, err := conf.ParseDuration(text)
		if err != nil {
			m.fail(fmt.Errorf("%s: default %q: %w", f.Name, text, err))
		}
		text = shortDuration(d.String())
	case f.List():
		text = strings.ReplaceAll(text, ",", ", ")
	}
	return "`" + escape(text) + "`"
}

// shortDuration drops the zero minutes and seconds of a duration's text:
// 24h0m0s is 24h, 1m0s is 1m.
func shortDuration(s string) string {
	if s == "0s" {
		return s
	}
	if t, ok := strings.CutSuffix(s, "m0s"); ok {
		s = t + "m"
	}
	if t, ok := strings.CutSuffix(s, "h0m"); ok {
		s = t + "h"
	}
	return s
}

// tagCell renders tag key of a struct field (what names it in an error), or
// def when it has none.
func (m *model) tagCell(what string, tag reflect.StructTag, key, def string) string {
	if v, ok := tag.Lookup(key); ok {
		return m.cell(what+": "+key+" tag", v)
	}
	return def
}

// cell renders text as a Markdown table cell; an error names what.
func (m *model) cell(what, text string) string {
	out, err := m.markdown(text)
	if err != nil {
		m.fail(fmt.Errorf("%s: %w", what, err))
	}
	return out
}

// table writes rows (the first is the header) as a Markdown table.
func table(rows [][]string) string {
	var b strings.Builder
	for i, r := range rows {
		b.WriteString("| " + strings.Join(r, " | ") + " |\n")
		if i == 0 {
			b.WriteString(strings.Repeat("|---", len(r)) + "|\n")
		}
	}
	return strings.TrimSuffix(b.String(), "\n")
}
