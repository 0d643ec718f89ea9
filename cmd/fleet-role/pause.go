package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"

	"github.com/fleet-role/fleet-role/api"
)

func newPauseCommand() *cobra.Command {
	var o clusterOptions
	var reason string
	cmd := &cobra.Command{
		Use: "pause --reason TEXT",
		Example: `  # Hold new swaps over a week of kernel upgrades
  fleet-role pause --reason "kernel upgrades this week"

  # Then let them start again
  fleet-role resume`,
		Short: "Hold every new swap, automatic or manual, until fleet-role resume",
		Long: `pause writes pause.json into the fleet-role-status ConfigMap, with who
paused (as the API server says) and why. While it is there no swap
starts: the automatic decision waits, a manual request waits unless made
with fleet-role swap --override pause. A swap under way goes on to its end.
fleet-role status shows the pause; fleet-role resume lifts it.`,
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if reason == "" {
				return usageError{errors.New("--reason is required: say why, for the others who read fleet-role status")}
			}
			return setControl(cmd, &o, func(by string, was *api.Pause) (string, string, error) {
				p := api.Pause{By: by, Reason: reason, At: time.Now().UTC().Truncate(time.Second)}
				b, err := json.Marshal(p)
				done := fmt.Sprintf("paused by %s: no swap starts until fleet-role resume; a swap under way goes on", by)
				if was != nil {
					done += fmt.Sprintf(" (the pause by %s, %q, is replaced)", was.By, was.Reason)
				}
				return string(b), done, err
			})
		},
	}
	cmd.Flags().StringVar(&reason, "reason", "", "why, shown in fleet-role status (required)")
	o.add(cmd)
	return cmd
}

func newResumeCommand() *cobra.Command {
	var o clusterOptions
	cmd := &cobra.Command{
		Use: "resume",
		Example: `  # Lift the pause fleet-role pause set; fleet-role status shows none after
  fleet-role resume`,
		Short: "Lift the pause: swaps start again",
		Args:  usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			return setControl(cmd, &o, func(by string, was *api.Pause) (string, string, error) {
				if was == nil {
					return "", "nothing was paused: swaps start as they did", nil
				}
				return "", fmt.Sprintf("resumed by %s: swaps start again (paused by %s: %s)", by, was.By, was.Reason), nil
			})
		},
	}
	o.add(cmd)
	return cmd
}

// setControl sets (or, for "", deletes) pause.json in the status
// ConfigMap, reading and writing again while the controller changes it.
// value is given who asks and the pause it replaces (nil where none was
// set).
func setControl(cmd *cobra.Command, o *clusterOptions, value func(by string, was *api.Pause) (v, done string, err error)) error {
	cfg, client, err := o.open()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(cmd.Context(), 30*time.Second)
	defer cancel()
	by := whoAmI(ctx, client)
	var done string
	err = retry.OnError(retry.DefaultRetry, statusChanged, func() error {
		cm, err := client.CoreV1().ConfigMaps(cfg.Namespace).Get(ctx, api.StatusConfigMap, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			cm = nil
		case err != nil:
			return fmt.Errorf("read %s/%s: %w", cfg.Namespace, api.StatusConfigMap, err)
		}
		var was *api.Pause
		if cm != nil && cm.Data[api.PauseKey] != "" {
			was = new(api.Pause)
			if err := json.Unmarshal([]byte(cm.Data[api.PauseKey]), was); err != nil {
				was = &api.Pause{By: "an unreadable " + api.PauseKey, Reason: err.Error()}
			}
		}
		var v string
		if v, done, err = value(by, was); err != nil {
			return err
		}
		return setStatusKey(ctx, client, cfg.Namespace, cm, api.PauseKey, v)
	})
	if statusChanged(err) {
		return errors.New("the status kept changing while it was written: run the command again")
	}
	if err != nil {
		return fmt.Errorf("write %s/%s: %w", cfg.Namespace, api.StatusConfigMap, err)
	}
	fmt.Fprintln(cmd.OutOrStdout(), done)
	return nil
}
