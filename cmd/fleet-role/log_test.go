package main

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fleet-role/fleet-role/api/logkey"
)

func TestTheLogFlagsPickTheFormatAndTheLevel(t *testing.T) {
	var b bytes.Buffer
	log, err := newLogger(&b, logOptions{format: "json", level: "warn"})
	require.NoError(t, err)
	log.Info("below the level")
	log.Warn("swap held", logkey.Node, "v1")
	var rec map[string]any
	require.NoError(t, json.Unmarshal(b.Bytes(), &rec), "one JSON record: %s", b.String())
	assert.Equal(t, "swap held", rec["msg"])
	assert.Equal(t, "v1", rec[logkey.Node])

	b.Reset()
	log, err = newLogger(&b, logOptions{format: "text", level: "debug"})
	require.NoError(t, err)
	log.Debug("no action taken")
	assert.Contains(t, b.String(), `level=DEBUG msg="no action taken"`)

	for _, o := range []logOptions{{format: "xml", level: "info"}, {format: "text", level: "loud"}} {
		_, err := newLogger(&b, o)
		assert.ErrorAs(t, err, new(usageError), "%+v", o)
	}
	code, _, stderr := runCLI(t, "controller", "--log-format", "xml")
	assert.Equal(t, 2, code)
	assert.Contains(t, stderr, `--log-format "xml": want text or json`)
}
