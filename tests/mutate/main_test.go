package main

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestApplyReplacesTheTokenAtTheMutantsPositionAsGremlinsMutatorDoes(t *testing.T) {
	src := filepath.Join(t.TempDir(), "p.go")
	require.NoError(t, os.WriteFile(src, []byte("package p\n\nfunc f(a, b int) bool {\n\tswitch {\n\tcase a == b && a < b: // a == b\n\t\treturn true\n\t}\n\treturn false\n}\n"), 0o644))
	for _, c := range []struct {
		m    mutation
		want string
	}{
		{mutation{Type: "CONDITIONALS_NEGATION", Line: 5, Column: 9}, "\tcase a != b && a < b: // a == b\n"},
		{mutation{Type: "INVERT_LOGICAL", Line: 5, Column: 14}, "\tcase a == b || a < b: // a == b\n"},
		{mutation{Type: "CONDITIONALS_BOUNDARY", Line: 5, Column: 19}, "\tcase a == b && a <= b: // a == b\n"},
		{mutation{Type: "CONDITIONALS_NEGATION", Line: 5, Column: 19}, "\tcase a == b && a >= b: // a == b\n"},
	} {
		out, err := apply(src, c.m)
		require.NoError(t, err, "%+v", c.m)
		assert.Contains(t, string(out), c.want, "%+v", c.m)
	}
	for _, m := range []mutation{
		{Type: "CONDITIONALS_NEGATION", Line: 5, Column: 14}, // && is no comparison
		{Type: "INVERT_LOGICAL", Line: 5, Column: 29},        // inside the comment
		{Type: "INVERT_NEGATIVES", Line: 5, Column: 9},       // not a token swap
	} {
		_, err := apply(src, m)
		assert.Error(t, err, "%+v", m)
	}
}
