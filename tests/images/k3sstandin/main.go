// Command k3sstandin stands in for k3s in the Docker platform's tests: run
// as "server" or "agent" it says what it was given, leaves a mark in the
// data volume, and runs until it is stopped.
package main

import (
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

func main() {
	role := "unknown"
	if len(os.Args) > 1 {
		role = os.Args[1]
	}
	fmt.Printf("k3s %s: args %q K3S_URL=%s\n", role, strings.Join(os.Args[1:], " "), os.Getenv("K3S_URL"))
	dir := "/var/lib/rancher/k3s"
	if err := os.MkdirAll(dir, 0o755); err == nil {
		mark := fmt.Sprintf("%s %s\n", role, time.Now().UTC().Format(time.RFC3339Nano))
		_ = os.WriteFile(filepath.Join(dir, role+".started"), []byte(mark), 0o644)
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	<-sig
}
