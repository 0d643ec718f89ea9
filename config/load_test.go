package config

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestReadFileRefusesAFileThatIsEmptyADirectoryOrOverTheLimit(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(p, []byte(content), 0o644))
		return p
	}
	for _, tc := range []struct {
		name, path, want string
	}{
		{"an empty file", write("empty", ""), "the file is empty"},
		{"a file of blank lines", write("blank", "\n  \n\t\n"), "the file is empty"},
		{"a directory", dir, "is a directory"},
		{"a file over 1 MiB", write("big", "version = 1\n"+strings.Repeat("#", MaxFileSize)), "larger than the 1048576 bytes (1 MiB) a configuration may be"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ReadFile(tc.path)
			require.ErrorIs(t, err, ErrInvalid)
			assert.Contains(t, err.Error(), tc.want)
			assert.NotContains(t, err.Error(), "\n")
		})
	}
	data, err := ReadFile(write("exactly", "version = 1\n"+strings.Repeat("#", MaxFileSize-13)+"\n"))
	require.NoError(t, err, "a file of exactly the limit is read")
	assert.Len(t, data, MaxFileSize)
}

func TestReadFileReadsAPipeNoFurtherThanOnePastTheLimit(t *testing.T) {
	r, w, err := os.Pipe()
	require.NoError(t, err)
	defer r.Close()
	go func() {
		defer w.Close()
		chunk := []byte(strings.Repeat("#", 64<<10))
		for range 10 * MaxFileSize / len(chunk) {
			if _, err := w.Write(chunk); err != nil {
				return // the reader stopped, as it should
			}
		}
	}()
	_, err = ReadFile("/dev/fd/" + strconv.Itoa(int(r.Fd())))
	require.ErrorIs(t, err, ErrInvalid)
	assert.Contains(t, err.Error(), "larger than the 1048576 bytes (1 MiB)")
}
