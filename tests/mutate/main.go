// Command mutate runs the mutants gremlins found but did not test, because
// Go's coverage profile holds no block at their position, against their
// package's tests, and prints each one's outcome and the package's
// figures with them counted.
//
// Go's cover tool starts a case's block after its condition, so the
// condition of a case of a tagless switch (`switch { case a && b: }`) is in
// no block and gremlins reports every mutant of it "NOT COVERED", though
// the tests evaluate it. This command applies each such mutant as gremlins
// would (the token at the mutant's position replaced), in a copy of the
// file handed to `go test -overlay`, so the tree is never changed, and
// reads the tests' verdict: killed when they fail, lived when they pass.
// A mutant the tests never reach lives, so no position is counted covered
// that is not.
//
//	go run ./tests/mutate -report bin/mutate-swapplan.json ./swapplan
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"go/scanner"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// report is the part of gremlins' JSON report (--output) read here.
type report struct {
	Files []struct {
		Name      string     `json:"file_name"`
		Mutations []mutation `json:"mutations"`
	} `json:"files"`
	Killed     int `json:"mutants_killed"`
	Lived      int `json:"mutants_lived"`
	NotCovered int `json:"mutants_not_covered"`
	NotViable  int `json:"mutants_not_viable"`
	Total      int `json:"mutants_total"`
}

type mutation struct {
	Type   string `json:"type"`
	Status string `json:"status"`
	Line   int    `json:"line"`
	Column int    `json:"column"`
}

// swaps are gremlins' mutators that replace one token by another
// (github.com/go-gremlins/gremlins internal/mutator/tokens.go).
var swaps = map[string]map[token.Token]token.Token{
	"CONDITIONALS_NEGATION": {token.EQL: token.NEQ, token.NEQ: token.EQL, token.LEQ: token.GTR, token.GTR: token.LEQ, token.LSS: token.GEQ, token.GEQ: token.LSS},
	"CONDITIONALS_BOUNDARY": {token.LSS: token.LEQ, token.LEQ: token.LSS, token.GTR: token.GEQ, token.GEQ: token.GTR},
	"INVERT_LOGICAL":        {token.LAND: token.LOR, token.LOR: token.LAND},
	"ARITHMETIC_BASE":       {token.ADD: token.SUB, token.SUB: token.ADD, token.MUL: token.QUO, token.QUO: token.MUL, token.REM: token.MUL},
	"INCREMENT_DECREMENT":   {token.INC: token.DEC, token.DEC: token.INC},
	"INVERT_ASSIGNMENTS":    {token.ADD_ASSIGN: token.SUB_ASSIGN, token.SUB_ASSIGN: token.ADD_ASSIGN, token.MUL_ASSIGN: token.QUO_ASSIGN, token.QUO_ASSIGN: token.MUL_ASSIGN, token.REM_ASSIGN: token.MUL_ASSIGN},
}

func main() {
	path := flag.String("report", "", "gremlins' JSON report (gremlins unleash --output)")
	timeout := flag.Duration("timeout", 5*time.Minute, "how long one run of the package's tests may take")
	flag.Parse()
	if *path == "" || flag.NArg() != 1 {
		fmt.Fprintln(os.Stderr, "usage: mutate -report gremlins.json ./package")
		os.Exit(2)
	}
	if err := run(*path, flag.Arg(0), *timeout); err != nil {
		fmt.Fprintln(os.Stderr, "mutate:", err)
		os.Exit(1)
	}
}

func run(path, pkg string, timeout time.Duration) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	var r report
	if err := json.Unmarshal(b, &r); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	dir, err := os.MkdirTemp("", "mutate-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	var killed, lived, skipped int
	for _, f := range r.Files {
		src := filepath.Join(pkg, filepath.Base(f.Name))
		for _, m := range f.Mutations {
			if m.Status != "NOT COVERED" {
				continue
			}
			where := fmt.Sprintf("%s:%d:%d", src, m.Line, m.Column)
			mutant, err := apply(src, m)
			if err != nil {
				skipped++
				fmt.Printf("%12s %s at %s: %v\n", "NOT RUN", m.Type, where, err)
				continue
			}
			outcome, err := test(dir, pkg, src, mutant, timeout)
			if err != nil {
				return fmt.Errorf("%s: %w", where, err)
			}
			if outcome != "LIVED" { // killed, or timed out: the tests did not pass
				killed++
			} else {
				lived++
			}
			fmt.Printf("%12s %s at %s\n", outcome, m.Type, where)
		}
	}
	total := r.Killed + r.Lived + r.NotCovered
	covered := r.Killed + r.Lived + killed + lived
	fmt.Printf("gremlins: killed %d, lived %d, not covered %d; of those not covered, run here: killed %d, lived %d, not run %d\n",
		r.Killed, r.Lived, r.NotCovered, killed, lived, skipped)
	fmt.Printf("covered %d of %d mutants (%.2f %%), killed %d of those covered (%.2f %%)\n",
		covered, total, percent(covered, total), r.Killed+killed, percent(r.Killed+killed, covered))
	return nil
}

func percent(a, b int) float64 {
	if b == 0 {
		return 0
	}
	return 100 * float64(a) / float64(b)
}

// apply returns src with m's token replaced as gremlins' mutator would.
func apply(src string, m mutation) ([]byte, error) {
	table, ok := swaps[m.Type]
	if !ok {
		return nil, fmt.Errorf("no token swap for %s", m.Type)
	}
	b, err := os.ReadFile(src)
	if err != nil {
		return nil, err
	}
	fset := token.NewFileSet()
	file := fset.AddFile(src, fset.Base(), len(b))
	var s scanner.Scanner
	s.Init(file, b, nil, 0)
	for {
		pos, tok, _ := s.Scan()
		if tok == token.EOF {
			return nil, fmt.Errorf("no token at %d:%d", m.Line, m.Column)
		}
		p := fset.Position(pos)
		if p.Line != m.Line || p.Column != m.Column {
			continue
		}
		to, ok := table[tok]
		if !ok {
			return nil, fmt.Errorf("%s does not change %q", m.Type, tok)
		}
		out := append([]byte{}, b[:p.Offset]...)
		out = append(out, to.String()...)
		return append(out, b[p.Offset+len(tok.String()):]...), nil
	}
}

// test runs the package's tests with src replaced by mutant: KILLED when
// they fail (or do not build), LIVED when they pass.
func test(dir, pkg, src string, mutant []byte, timeout time.Duration) (string, error) {
	abs, err := filepath.Abs(src)
	if err != nil {
		return "", err
	}
	file := filepath.Join(dir, filepath.Base(src))
	if err := os.WriteFile(file, mutant, 0o644); err != nil {
		return "", err
	}
	overlay, err := json.Marshal(map[string]any{"Replace": map[string]string{abs: file}})
	if err != nil {
		return "", err
	}
	ov := filepath.Join(dir, "overlay.json")
	if err := os.WriteFile(ov, overlay, 0o644); err != nil {
		return "", err
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	out, err := exec.CommandContext(ctx, "go", "test", "-count=1", "-failfast", "-overlay", ov, pkg).CombinedOutput()
	var exit *exec.ExitError
	switch {
	case err == nil:
		return "LIVED", nil
	case ctx.Err() != nil:
		return "TIMED OUT", nil
	case errors.As(err, &exit):
		return "KILLED", nil
	}
	return "", fmt.Errorf("go test: %w: %s", err, strings.TrimSpace(string(out)))
}
