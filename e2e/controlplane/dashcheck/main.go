// Command dashcheck reads Grafana dashboard JSON files and judges each against the dashboard schema's Go
// types that github.com/grafana/grafana-foundation-sdk generates from Grafana's own schema (the classic,
// schemaVersion < 2 "dashboard" kind that Grafana's sidecar loads from a ConfigMap).
//
// What it judges, in the SDK's own words (its strict unmarshalling and Validate):
//   - a field the schema does not name, at the top level, in a panel, a row, a gridPos, a datasource ref,
//     the templating list, the annotations, the time and timepicker blocks;
//   - a value of the wrong type (a gridPos that is a string, a panel id that is a string, ...), a required
//     field that is missing or null, a constraint broken (fiscalYearStartMonth < 12, ...);
//   - a core panel's `options` and `fieldConfig.defaults.custom` against that panel plugin's own schema;
//   - a query against its data source plugin's schema (a Prometheus query's fields and types).
//
// What the SDK cannot judge by itself, and this command adds:
//   - a panel whose `type` names no panel plugin the SDK knows: the SDK accepts its options as any JSON,
//     so nothing in it would be checked; here it is an error (the chart's dashboard uses core panels only);
//   - a query whose data source type is missing or names no data source the SDK knows: the SDK keeps it
//     as an opaque bag; here it is an error for the same reason.
//
// Exit status: 0 and no output when every file passes; 1 with one line per finding
// ("FILE: PATH: MESSAGE") when any does not; 2 when a file cannot be read or is not JSON at all.
package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strconv"

	"github.com/grafana/grafana-foundation-sdk/go/cog"
	"github.com/grafana/grafana-foundation-sdk/go/cog/plugins"
	"github.com/grafana/grafana-foundation-sdk/go/cog/variants"
	"github.com/grafana/grafana-foundation-sdk/go/dashboard"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: dashcheck DASHBOARD.json...")
		os.Exit(2)
	}
	// Registers the core panel plugins' and data sources' schemas, which the strict unmarshalling of a
	// panel's options and of its queries looks up by `type`.
	plugins.RegisterDefaultPlugins()

	status := 0
	for _, path := range os.Args[1:] {
		raw, err := os.ReadFile(path)
		if err != nil {
			fmt.Fprintf(os.Stderr, "%s: %v\n", path, err)
			os.Exit(2)
		}
		if !json.Valid(raw) {
			fmt.Fprintf(os.Stderr, "%s: not JSON\n", path)
			os.Exit(2)
		}
		for _, finding := range check(raw) {
			fmt.Printf("%s: %s\n", path, finding)
			status = 1
		}
	}
	os.Exit(status)
}

// check returns the findings for one dashboard: the schema's, then its constraints, then the panel kinds
// and query data sources it could not look into.
func check(raw []byte) []string {
	board := dashboard.Dashboard{}
	findings := messages(board.UnmarshalJSONStrict(raw))
	// The SDK's strict decoder (v0.0.22) reports a panel's findings but never stores the panel: its
	// panel-or-row wrapper returns an empty, non-nil error list before keeping what it decoded, so
	// board.Panels holds empty values and Validate would judge no panel. Decode the panels here instead.
	var shape struct {
		Panels []json.RawMessage `json:"panels"`
	}
	if err := json.Unmarshal(raw, &shape); err != nil {
		return findings // not an object with a panel list: the schema said so above
	}
	board.Panels = nil
	for i, rawPanel := range shape.Panels {
		path := "panels[" + strconv.Itoa(i) + "]"
		p, ok := decodePanel(rawPanel)
		if !ok {
			continue // its findings are in the schema's above
		}
		board.Panels = append(board.Panels, p)
		if p.Panel != nil {
			findings = append(findings, unjudged(path, *p.Panel, rawPanel)...)
		}
		if p.RowPanel != nil {
			var row struct {
				Panels []json.RawMessage `json:"panels"`
			}
			_ = json.Unmarshal(rawPanel, &row)
			for j, inner := range p.RowPanel.Panels {
				findings = append(findings, unjudged(path+".panels["+strconv.Itoa(j)+"]", inner, row.Panels[j])...)
			}
		}
	}
	if len(findings) == 0 {
		// Validate reads decoded values (gridPos within the 24 columns, a fiscal month < 12, ...): only
		// meaningful once decoding found nothing.
		findings = messages(board.Validate())
	}
	return findings
}

// decodePanel decodes one entry of a panel list as a row or a panel, strictly; false when the schema
// refuses it.
func decodePanel(raw json.RawMessage) (dashboard.PanelOrRowPanel, bool) {
	var kind struct {
		Type string `json:"type"`
	}
	if json.Unmarshal(raw, &kind) != nil {
		return dashboard.PanelOrRowPanel{}, false
	}
	if kind.Type == "row" {
		row := &dashboard.RowPanel{}
		return dashboard.PanelOrRowPanel{RowPanel: row}, len(messages(row.UnmarshalJSONStrict(raw))) == 0
	}
	panel := &dashboard.Panel{}
	return dashboard.PanelOrRowPanel{Panel: panel}, len(messages(panel.UnmarshalJSONStrict(raw))) == 0
}

// unjudged names what of a panel the SDK's panel decoder does not look into: a panel kind without a
// schema, a query of no known data source, and the fieldConfig (decoded leniently there, strictly here).
func unjudged(path string, panel dashboard.Panel, raw json.RawMessage) []string {
	var findings []string
	var fields struct {
		FieldConfig json.RawMessage `json:"fieldConfig"`
	}
	if json.Unmarshal(raw, &fields) == nil && fields.FieldConfig != nil {
		config := dashboard.FieldConfigSource{}
		for _, m := range messages(config.UnmarshalJSONStrict(fields.FieldConfig)) {
			findings = append(findings, path+".fieldConfig."+m)
		}
	}
	if _, known := cog.ConfigForPanelcfgVariant(panel.Type); !known {
		findings = append(findings, fmt.Sprintf("%s.type: %q is not a panel plugin the dashboard schema knows, "+
			"so its options cannot be checked", path, panel.Type))
	}
	for i, target := range panel.Targets {
		if _, opaque := target.(variants.UnknownDataquery); opaque {
			findings = append(findings, fmt.Sprintf("%s.targets[%d]: the query names no data source type the "+
				"schema knows (datasource.type on the query or the panel), so it cannot be checked", path, i))
		}
	}
	return findings
}

// messages splits the SDK's error into its findings, each "path: message" as the SDK words it. The SDK
// returns its error list typed even when it is empty (a non-nil error that holds nothing): no finding.
func messages(err error) []string {
	if err == nil {
		return nil
	}
	var many cog.BuildErrors
	if errors.As(err, &many) {
		out := make([]string, 0, len(many))
		for _, e := range many {
			out = append(out, e.Error())
		}
		return out
	}
	return []string{err.Error()}
}
