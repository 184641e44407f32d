package main

import (
	"fmt"
	"reflect"
	"strings"

	"github.com/idemproxy/idemproxy/internal/conf"
	"github.com/idemproxy/idemproxy/proxy"
)

// coreTable is the table of the core's settings: those of the Caddy handler,
// which every surface has, then the Go-only fields of the core.
func (m *model) coreTable() (string, error) {
	t := [][]string{{"setting (file, Caddyfile, JSON)", "proxy flag, variable", "Go", "default", "what it does"}}
	for _, f := range m.core {
		pf, _ := conf.Lookup(m.proxy, f.Name)
		row, err := m.settingRow(pf, false)
		if err != nil {
			return "", err
		}
		t = append(t, row)
	}
	for _, g := range m.coreGo {
		row, err := m.goRow(g, false)
		if err != nil {
			return "", err
		}
		t = append(t, row)
	}
	return table(t), nil
}

// proxyTable is the table of the proxy's own settings and the stores': the
// proxy's that are not the core's, the Caddy handler's own JSON members that
// the proxy has no setting for, and the Go-only fields reached from them.
func (m *model) proxyTable() (string, error) {
	t := [][]string{{"setting (file)", "proxy flag, variable", "Caddy", "Go", "default", "what it does"}}
	for _, f := range m.proxy {
		if m.isCore[f.Name] {
			continue
		}
		row, err := m.settingRow(f, true)
		if err != nil {
			return "", err
		}
		t = append(t, row)
	}
	for _, mb := range m.members {
		if _, ok := conf.Lookup(m.proxy, mb.name); ok {
			continue
		}
		doc, err := m.docComment(handlerType, mb.field.Name)
		if err != nil {
			return "", err
		}
		caddyCell, err := m.tagCell(mb.field.Tag, "caddy", "`"+mb.name+" …`")
		if err != nil {
			return "", err
		}
		goCell, err := m.tagCell(mb.field.Tag, "go", "—")
		if err != nil {
			return "", err
		}
		def, err := m.tagCell(mb.field.Tag, "default", "none")
		if err != nil {
			return "", err
		}
		t = append(t, []string{"—", "—", caddyCell, goCell, def, escape(doc)})
	}
	for _, g := range m.proxyGo {
		row, err := m.goRow(g, true)
		if err != nil {
			return "", err
		}
		t = append(t, row)
	}
	return table(t), nil
}

// settingRow is the row of setting f of the proxy (withCaddy: with the Caddy
// column, for a setting that is not a subdirective).
func (m *model) settingRow(f conf.Field, withCaddy bool) ([]string, error) {
	help, err := m.markdown(f.Help)
	if err != nil {
		return nil, fmt.Errorf("%s: help: %w", f.Name, err)
	}
	goCell, err := m.goCell(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", f.Name, err)
	}
	def, err := m.defaultCell(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", f.Name, err)
	}
	row := []string{"`" + f.Name + "`", "`--" + f.FlagName() + "`, `" + f.EnvName(proxy.EnvPrefix) + "`"}
	if withCaddy {
		c, err := m.caddyCell(f)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", f.Name, err)
		}
		row = append(row, c)
	}
	return append(row, goCell, def, help), nil
}

// goRow is the row of a Go-only field: its description is its doc comment,
// Go being where it is set and read.
func (m *model) goRow(g goField, withCaddy bool) ([]string, error) {
	doc, err := m.docComment(g.owner, g.field.Name)
	if err != nil {
		return nil, err
	}
	def, err := m.tagCell(g.field.Tag, "default", "none")
	if err != nil {
		return nil, err
	}
	row := []string{"—", "—"}
	if withCaddy {
		row = append(row, "—")
	}
	return append(row, "`"+goName(g.owner, g.field.Name)+"`", def, escape(doc)), nil
}

// goCell is what a Go user sets: the field's go tag; else, inside a prefixed
// struct tagged go:"pkg.Type", that type's field of the same name; else the
// field itself, when a Go user has the type that declares it.
func (m *model) goCell(f conf.Field) (string, error) {
	if v, ok := f.StructField.Tag.Lookup("go"); ok {
		return m.markdown(v)
	}
	if v, ok := f.Tag("go"); ok {
		return "`" + v + "." + f.StructField.Name + "`", nil
	}
	if f.Owner == proxyType || f.Owner == handlerType || strings.Contains(f.Owner.PkgPath(), "/internal/") {
		return "—", nil
	}
	return "`" + goName(f.Owner, f.StructField.Name) + "`", nil
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
func (m *model) caddyCell(f conf.Field) (string, error) {
	if v, ok := f.StructField.Tag.Lookup("caddy"); ok {
		c, err := m.markdown(v)
		return "(" + c + ")", err
	}
	if sm, g, ok := m.moduleOf(f); ok {
		return "`store " + sm.name + locators(sm) + " { " + g.Name + " }`", nil
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
		return "`" + mb.name + " " + escape(strings.Join(alts, " | ")) + "`", nil
	}
	if f.Needs != "" && strings.HasPrefix(f.Needs, "store=") {
		return "", fmt.Errorf("a store's setting that no Caddy store module has (does the generator still find the store modules?)")
	}
	return "—", nil
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
func (m *model) defaultCell(f conf.Field) (string, error) {
	if v, ok := f.StructField.Tag.Lookup("default"); ok {
		return m.markdown(v)
	}
	text := f.Text(&m.proxyDef)
	switch {
	case text == "":
		return "none", nil
	case f.Duration():
		d, err := conf.ParseDuration(text)
		if err != nil {
			return "", err
		}
		text = shortDuration(d.String())
	case f.List():
		text = strings.ReplaceAll(text, ",", ", ")
	}
	return "`" + escape(text) + "`", nil
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

// tagCell renders tag key of a struct field, or def when it has none.
func (m *model) tagCell(tag reflect.StructTag, key, def string) (string, error) {
	if v, ok := tag.Lookup(key); ok {
		return m.markdown(v)
	}
	return def, nil
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
