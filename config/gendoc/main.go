// Command gendoc writes the configuration reference, docs/config-reference.md,
// from package config's types, defaults and doc comments:
//
//	go run ./config/gendoc
//
// from anywhere in the module (go generate ./config runs it too). With
// -check it writes nothing and exits 1 when the file is not current.
package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"github.com/fleet-role/fleet-role/config/internal/refdoc"
)

func main() {
	check := flag.Bool("check", false, "write nothing; exit 1 when the reference is not current")
	flag.Parse()
	if err := run(*check); err != nil {
		fmt.Fprintf(os.Stderr, "gendoc: %v\n", err)
		os.Exit(1)
	}
}

func run(check bool) error {
	root, err := moduleRoot()
	if err != nil {
		return err
	}
	out, err := refdoc.Render(filepath.Join(root, "config"))
	if err != nil {
		return err
	}
	path := filepath.Join(root, "docs", "config-reference.md")
	if check {
		have, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if !bytes.Equal(have, out) {
			return fmt.Errorf("%s is not current: run go run ./config/gendoc", path)
		}
		return nil
	}
	return os.WriteFile(path, out, 0o644)
}

// moduleRoot is the nearest directory at or above the working directory
// that holds go.mod.
func moduleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("no go.mod at or above the working directory")
		}
		dir = parent
	}
}
