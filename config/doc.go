// Package config holds fleet-role's configuration: the types, their
// defaults, strict TOML loading (a version field, unknown keys rejected
// with their line, durations as strings) and validation that reports every
// problem at once.
package config

//go:generate go run ./gendoc
