package config

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
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

// readFile reads a configuration file, naming it in the error.
func readFile(path string) ([]byte, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalid, err)
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
