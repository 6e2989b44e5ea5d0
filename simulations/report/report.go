// Package report holds the results of a simulation as a small table,
// prints it, writes it as CSV and draws curves from it.
package report

import (
	"encoding/csv"
	"fmt"
	"image/color"
	"io"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
)

// A Table is a named list of rows under column headings. Cells are
// formatted when added, so that two tables compare as text.
type Table struct {
	Title string
	Cols  []string
	Rows  [][]string
}

// Add appends a row; each value is formatted with %v, floats with 4
// significant digits.
func (t *Table) Add(vals ...any) {
	row := make([]string, len(vals))
	for i, v := range vals {
		switch v := v.(type) {
		case float64:
			row[i] = strconv.FormatFloat(v, 'g', 4, 64)
		default:
			row[i] = fmt.Sprint(v)
		}
	}
	t.Rows = append(t.Rows, row)
}

// Print writes the table aligned in columns.
func (t *Table) Print(w io.Writer) {
	fmt.Fprintf(w, "# %s\n", t.Title)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, strings.Join(t.Cols, "\t")+"\t")
	for _, r := range t.Rows {
		fmt.Fprintln(tw, strings.Join(r, "\t")+"\t")
	}
	tw.Flush()
}

// String returns the printed table.
func (t *Table) String() string {
	var b strings.Builder
	t.Print(&b)
	return b.String()
}

// WriteCSV writes the table to the file name.
func (t *Table) WriteCSV(name string) error {
	f, err := os.Create(name)
	if err != nil {
		return err
	}
	w := csv.NewWriter(f)
	w.Write(t.Cols)
	w.WriteAll(t.Rows)
	if err := w.Error(); err != nil {
		f.Close()
		return fmt.Errorf("write %s: %w", name, err)
	}
	return f.Close()
}

// Col returns the index of the column named name, or -1.
func (t *Table) Col(name string) int {
	for i, c := range t.Cols {
		if c == name {
			return i
		}
	}
	return -1
}

// Float returns the cell of row i in column name as a number.
func (t *Table) Float(i int, name string) float64 {
	c := t.Col(name)
	if c < 0 {
		panic(fmt.Sprintf("table %q has no column %q", t.Title, name))
	}
	v, err := strconv.ParseFloat(strings.TrimSuffix(t.Rows[i][c], "%"), 64)
	if err != nil {
		panic(fmt.Sprintf("table %q row %d column %q: %v", t.Title, i, name, err))
	}
	return v
}

// Plot draws y against x, one line per distinct value of the series
// columns (comma separated; a single line if series is ""), and saves it
// as a PNG.
func (t *Table) Plot(name, x, y, series, xlabel, ylabel string) error {
	p := plot.New()
	p.Title.Text = t.Title
	p.X.Label.Text = xlabel
	p.Y.Label.Text = ylabel
	p.Add(plotter.NewGrid())
	var order []string
	lines := make(map[string]plotter.XYs)
	for i, r := range t.Rows {
		var parts []string
		if series != "" {
			for c := range strings.SplitSeq(series, ",") {
				parts = append(parts, c+"="+r[t.Col(c)])
			}
		}
		key := strings.Join(parts, " ")
		if _, ok := lines[key]; !ok {
			order = append(order, key)
		}
		lines[key] = append(lines[key], plotter.XY{X: t.Float(i, x), Y: t.Float(i, y)})
	}
	for k, key := range order {
		l, pts, err := plotter.NewLinePoints(lines[key])
		if err != nil {
			return err
		}
		c := plotutil.Color(k)
		if c == nil {
			c = color.Black
		}
		l.Color, pts.Color = c, c
		pts.Shape = plotutil.Shape(k)
		p.Add(l, pts)
		if key != "" {
			p.Legend.Add(key, l, pts)
		}
	}
	p.Legend.Left = false
	p.Legend.Top = false
	p.Legend.XOffs = -vg.Millimeter
	p.Legend.YOffs = vg.Millimeter
	return p.Save(6*vg.Inch, 4*vg.Inch, name)
}
