package config

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/BurntSushi/toml"
)

// Version is the configuration format version this build reads.
const Version = 1

// ErrInvalid marks a configuration that cannot be used: unreadable,
// malformed, with unknown keys or values that fail validation.
var ErrInvalid = errors.New("invalid configuration")

// decodeStrict decodes TOML into v, rejecting unknown keys with their line.
// The value is left with its defaults where the file is silent.
func decodeStrict(data []byte, v any) error {
	md, err := toml.NewDecoder(bytes.NewReader(data)).Decode(v)
	if err != nil {
		var pe toml.ParseError
		if errors.As(err, &pe) {
			if pe.LastKey != "" {
				return fmt.Errorf("%w: line %d: key %q: %s", ErrInvalid, pe.Position.Line, pe.LastKey, pe.Message)
			}
			return fmt.Errorf("%w: line %d: %s", ErrInvalid, pe.Position.Line, pe.Message)
		}
		return fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	var errs []error
	for _, k := range md.Undecoded() {
		key := k.String()
		if line := keyLine(data, k); line > 0 {
			errs = append(errs, fmt.Errorf("line %d: unknown key %q", line, key))
		} else {
			errs = append(errs, fmt.Errorf("unknown key %q", key))
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("%w: %w", ErrInvalid, errors.Join(errs...))
	}
	return nil
}

// decodeLoose decodes TOML without the strictness, to look at its keys.
func decodeLoose(data []byte, v any) error {
	_, err := toml.NewDecoder(bytes.NewReader(data)).Decode(v)
	return err
}

// keyLine finds the line that defines the key, following table headers.
// It returns 0 when the key is defined in a way it does not follow (an
// inline table, say); the error then says the key without its line.
func keyLine(data []byte, key toml.Key) int {
	want := key.String()
	table := ""
	sc := bufio.NewScanner(bytes.NewReader(data))
	for line := 1; sc.Scan(); line++ {
		s := strings.TrimSpace(sc.Text())
		switch {
		case s == "" || strings.HasPrefix(s, "#"):
			continue
		case strings.HasPrefix(s, "[[") && strings.Contains(s, "]]"):
			table = strings.TrimSpace(s[2:strings.Index(s, "]]")])
			if table == want {
				return line
			}
			continue
		case strings.HasPrefix(s, "[") && strings.Contains(s, "]"):
			table = strings.TrimSpace(s[1:strings.Index(s, "]")])
			if table == want {
				return line
			}
			continue
		}
		k, _, ok := strings.Cut(s, "=")
		if !ok {
			continue
		}
		full := strings.Trim(strings.TrimSpace(k), `"`)
		if table != "" {
			full = table + "." + full
		}
		if full == want {
			return line
		}
	}
	return 0
}

// MaxFileSize is the most a configuration file may hold. The defaults with
// their comments are some 5 KiB; a file far larger is a wrong path, and
// is refused before it is read whole.
const MaxFileSize = 1 << 20

// ReadFile reads a configuration file whole, refusing one that is empty,
// a directory, or larger than MaxFileSize. Its errors are ErrInvalid; the
// caller names the file.
func ReadFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	defer f.Close()
	// Note: a regular file's size is known before it is read; a pipe's
	// (`config validate <(...)`) is found by reading one byte past the
	// limit.
	if fi, err := f.Stat(); err == nil && fi.Mode().IsRegular() && fi.Size() > MaxFileSize {
		return nil, fmt.Errorf("%w: %d bytes, larger than the %d bytes (1 MiB) a configuration may be", ErrInvalid, fi.Size(), MaxFileSize)
	}
	data, err := io.ReadAll(io.LimitReader(f, MaxFileSize+1))
	switch {
	case err != nil:
		return nil, fmt.Errorf("%w: %v", ErrInvalid, err)
	case len(data) > MaxFileSize:
		return nil, fmt.Errorf("%w: larger than the %d bytes (1 MiB) a configuration may be", ErrInvalid, MaxFileSize)
	case len(bytes.TrimSpace(data)) == 0:
		return nil, fmt.Errorf("%w: the file is empty", ErrInvalid)
	}
	return data, nil
}

// problems collects validation problems, each naming its key.
type problems []error

func (p *problems) add(key, format string, args ...any) {
	*p = append(*p, fmt.Errorf("%s: %s", key, fmt.Sprintf(format, args...)))
}

func (p problems) err() error {
	if len(p) == 0 {
		return nil
	}
	return fmt.Errorf("%w: %w", ErrInvalid, errors.Join(p...))
}
