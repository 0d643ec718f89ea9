package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"

	"github.com/fleet-role/fleet-role/api"
	"github.com/fleet-role/fleet-role/api/logkey"
	"github.com/fleet-role/fleet-role/config"
	"github.com/fleet-role/fleet-role/controller"
	"github.com/fleet-role/fleet-role/controller/adapt"
	"github.com/fleet-role/fleet-role/swapplan"
)

// defaultControllerConfig is where the Deployment mounts the configuration.
const defaultControllerConfig = "/etc/fleet-role/controller.toml"

// controllerConfigPath is the --config file; with none given, the mounted
// one if there is one, else "" (the defaults).
func controllerConfigPath(flag string) string {
	if flag != "" {
		return flag
	}
	if _, err := os.Stat(defaultControllerConfig); err != nil {
		return ""
	}
	return defaultControllerConfig
}

// clusterOptions are the flags of the commands that reach the cluster as
// the controller does: its configuration, a kubeconfig and its context,
// and the controller's namespace.
type clusterOptions struct {
	config, kubeconfig, context, namespace string
}

// add defines the flags on cmd, with completion of the kubeconfig's
// contexts and of the cluster's namespaces.
func (o *clusterOptions) add(cmd *cobra.Command) {
	f := cmd.Flags()
	f.StringVar(&o.config, "config", "", "the controller configuration (default: "+defaultControllerConfig+" if it exists)")
	f.StringVar(&o.kubeconfig, "kubeconfig", "", "a kubeconfig (default: as kubectl finds one, KUBECONFIG, then ~/.kube/config; then "+k3sKubeconfig+" where readable; then in-cluster)")
	f.StringVar(&o.context, "context", "", "the kubeconfig's context to use (default: its current context)")
	f.StringVarP(&o.namespace, "namespace", "n", "", "the controller's namespace, where its Lease and fleet-role-status are (default: the configuration's namespace, "+api.Namespace+" unless set)")
	_ = cmd.RegisterFlagCompletionFunc("context", func(*cobra.Command, []string, string) ([]cobra.Completion, cobra.ShellCompDirective) {
		return kubeconfigContexts(o.kubeconfig), cobra.ShellCompDirectiveNoFileComp
	})
	_ = cmd.RegisterFlagCompletionFunc("namespace", func(*cobra.Command, []string, string) ([]cobra.Completion, cobra.ShellCompDirective) {
		return o.namespaces(), cobra.ShellCompDirectiveNoFileComp
	})
}

// controllerConfig loads the configuration, its namespace the one -n
// names where it is given.
func (o *clusterOptions) controllerConfig() (config.Controller, error) {
	cfg, err := controllerConfig(o.config)
	if err != nil || o.namespace == "" {
		return cfg, err
	}
	if errs := validation.IsDNS1123Label(o.namespace); len(errs) > 0 {
		return cfg, usageError{fmt.Errorf("-n %q: not a namespace name: %s", o.namespace, strings.Join(errs, "; "))}
	}
	cfg.Namespace = o.namespace
	return cfg, nil
}

// client reaches the cluster findCluster finds, in --context's context.
func (o *clusterOptions) client() (kubernetes.Interface, error) {
	rc, err := findCluster(o.kubeconfig, o.context)
	if err != nil {
		return nil, err
	}
	return newKubeClient(rc)
}

// open is what the commands that reach the cluster start with: the
// controller's configuration and a client.
func (o *clusterOptions) open() (config.Controller, kubernetes.Interface, error) {
	cfg, err := o.controllerConfig()
	if err != nil {
		return cfg, nil, err
	}
	client, err := o.client()
	return cfg, client, err
}

// controllerConfig loads the configuration controllerConfigPath names.
func controllerConfig(flag string) (config.Controller, error) {
	path := controllerConfigPath(flag)
	if path == "" {
		return config.DefaultController(), nil
	}
	c, err := config.LoadController(path)
	if err != nil {
		return c, fmt.Errorf("%s: %w", path, err)
	}
	return c, nil
}

func newControllerCommand() *cobra.Command {
	var o clusterOptions
	var logs logOptions
	cmd := &cobra.Command{
		Use: "controller --config FILE",
		Example: `  # As the fleet-role-controller Deployment runs it
  fleet-role controller --config /etc/fleet-role/controller.toml

  # Outside the cluster, with a kubeconfig's context, logging each pass's plan
  fleet-role controller --config controller.toml --context prod --log-level debug`,
		Short: "Run the controller (the fleet-role-controller Deployment)",
		Args:  usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := o.controllerConfig()
			if err != nil {
				return err
			}
			log, err := newLogger(cmd.ErrOrStderr(), logs)
			if err != nil {
				return err
			}
			rc, err := findCluster(o.kubeconfig, o.context)
			if err != nil {
				return err
			}
			servers, err := controllerServers(rc, log)
			if err != nil {
				return err
			}
			nodes := &nodeAddresses{known: map[string]string{}}
			follow, err := followServers(rc, servers, cfg.Namespace, nodes.address)
			if err != nil {
				return err
			}
			client, err := newKubeClient(rc)
			if err != nil {
				return err
			}
			nodes.client = client
			host, _ := os.Hostname()
			c, err := controller.New(controller.Options{Config: cfg, Client: client, Log: log,
				Identity: host + "-" + strconv.Itoa(os.Getpid()), Registry: newRegistry()})
			if err != nil {
				return err
			}
			ctx, cancel := context.WithCancelCause(cmd.Context())
			defer cancel(nil)
			go follow(ctx)
			path := controllerConfigPath(o.config)
			if path != "" {
				w := newConfigWatch(path, cfg, log.With(logkey.Component, "config"))
				go func() {
					if w.run(ctx) {
						cancel(errConfigChanged)
					}
				}()
			}
			b := build()
			log.Info("starting", logkey.Version, b.Version, logkey.Commit, b.Commit, logkey.DryRun, cfg.DryRun, logkey.Namespace, cfg.Namespace, logkey.Config, path)
			err = c.Run(ctx)
			if errors.Is(context.Cause(ctx), errConfigChanged) {
				// A clean exit: the Pod's container is started again, with
				// the new configuration.
				log.Info("configuration changed; exiting to start again with it", logkey.Config, path)
				return nil
			}
			return err
		},
	}
	logFlags(cmd, &logs)
	o.add(cmd)
	return cmd
}

func newSwapCommand() *cobra.Command {
	var o clusterOptions
	var force, cancelSwap, wait, dryRun bool
	var overrides []string
	var output string
	var timeout time.Duration
	cmd := &cobra.Command{
		Use: "swap OUT IN [--override pause|holds|domains]... [--dry-run] | swap --cancel",
		Example: `  # Swap the voter v2 for the standby s1; fleet-role status --watch follows it
  fleet-role swap v2 s1

  # What would it do, and what holds it now? Nothing is written
  fleet-role swap --dry-run v2 s1

  # The same, waiting for its end: exit 0 completed, 3 rolled back,
  # 4 abandoned, 5 pending, 6 the --timeout ran out
  fleet-role swap v2 s1 --wait --timeout 30m

  # While the controller is paused and kured holds its lock: pass those
  # two, and only those (a crowded failure domain still refuses it)
  fleet-role swap v2 s1 --override pause --override holds
  fleet-role swap v2 s1 --override pause,holds

  # Take the swap under way back
  fleet-role swap --cancel

  # A release in another namespace, through a kubeconfig's context
  fleet-role swap v2 s1 -n ops --context prod`,
		Short: "Ask the controller to swap the voter OUT for the standby IN, or to take the swap under way back",
		Long: `swap checks the request against the cluster (OUT a voter, IN an eligible
standby, no swap under way) and writes it into the fleet-role-status
ConfigMap as request.json; the controller carries it out, in a dry run
too, through every gate but the cooldown and the verdicts.
The requester is who the API server says the caller is.

Three refusals of the start can be passed, each by its own override,
named with --override (again, or comma-separated), and only that one:
  pause    the controller is paused (fleet-role pause): swap refuses the
           request, the controller would hold it
  holds    a hold is in force (kured's reboot lock, an upgrade Plan, a
           Prometheus alert: the holds of the configuration)
  domains  the swap would put a majority of the voters in one failure
           domain (the Nodes' failure_domain_label)
The overrides are written in the request and kept in the swap's record
and its history (fleet-role history: "started past: pause, holds").
Nothing passes the other gates (the voters' health and membership).
--force, which passed all three at once, is gone: name the overrides.

swap --dry-run OUT IN writes nothing: it reads the cluster as the
controller does (the holds as it last published them), runs the planner
with the request it would write, and prints whether the swap would start
now or each reason that holds or refuses it, and the steps the swap
would take, in order. -o json or -o yaml print the same as a document.

swap --cancel asks the controller to take the swap under way back from
the step it is at: abandoned before the candidate's promotion, rolled back
after it (the candidate's member removed, both Nodes uncordoned). Once the
outgoing voter has stepped down it is refused, with the reason: from there
the swap goes on, and the way back is a new swap once it ends. With no
swap under way it withdraws a request that has not started one.

Of two people asking at once, the first wins: a request that waits to be
carried out is not replaced by another (one the controller refuses is).`,
		Args: func(cmd *cobra.Command, args []string) error {
			if force {
				return usageError{errForce}
			}
			for _, v := range overrides {
				if !slices.Contains(api.Overrides(), v) {
					return usageError{fmt.Errorf("--override %q: want %s (each its own refusal; --override again, or comma-separated, for more)",
						v, strings.Join(api.Overrides(), ", "))}
				}
			}
			switch {
			case cancelSwap && len(overrides) > 0:
				return usageError{errors.New("--cancel and --override: one or the other")}
			case cancelSwap && dryRun:
				return usageError{errors.New("--cancel and --dry-run: --dry-run previews a swap OUT IN")}
			case cancelSwap && wait:
				return usageError{errors.New("--wait follows the swap a request starts; follow a cancel with fleet-role status --watch")}
			case dryRun && wait:
				return usageError{errors.New("--dry-run and --wait: a dry run starts nothing to wait for")}
			case output != "" && !dryRun:
				return usageError{fmt.Errorf("-o %q: only with --dry-run", output)}
			case output != "" && output != "json" && output != "yaml":
				return usageError{fmt.Errorf("-o %q: want json or yaml (default: text)", output)}
			case timeout < 0:
				return usageError{fmt.Errorf("--timeout %s: must not be negative", timeout)}
			case cancelSwap && len(args) > 0:
				return usageError{fmt.Errorf("--cancel takes the swap under way, no arguments: got %q", args)}
			case cancelSwap:
				return nil
			}
			return usageArgs(func(_ *cobra.Command, args []string) error {
				if len(args) != 2 {
					return fmt.Errorf("want OUT, the voter to swap out, and IN, the standby to swap in: got %d argument(s) %q", len(args), args)
				}
				return nil
			})(cmd, args)
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			if cancelSwap {
				return cancelTheSwap(cmd, &o)
			}
			cfg, client, err := o.open()
			if err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), 30*time.Second)
			defer cancel()
			out, in := args[0], args[1]
			by := whoAmI(ctx, client)
			overrides := api.NormalOverrides(overrides)
			if dryRun {
				now := time.Now()
				q := api.ManualRequest{Out: out, In: in, At: now.UTC().Truncate(time.Second), By: by, Overrides: overrides}
				p, err := previewSwap(ctx, client, cfg, q, now)
				if err != nil {
					return err
				}
				if output != "" {
					return encode(cmd.OutOrStdout(), output, p)
				}
				return writePreview(cmd.OutOrStdout(), p)
			}
			var req api.ManualRequest
			// The status the controller publishes may change between the
			// read and the write, or be created by the controller after a
			// read that found none: read, check and write again then.
			err = retry.OnError(retry.DefaultRetry, statusChanged, func() error {
				snap, cm, err := readCluster(ctx, client, cfg)
				if err != nil {
					return err
				}
				if err := swapplan.CheckRequest(snap, out, in, overrides); err != nil {
					return fmt.Errorf("refused: %w", err)
				}
				if pa := snap.Pause; pa != nil && !slices.Contains(overrides, api.OverridePause) {
					return fmt.Errorf("refused: the controller is paused by %s since %s (%s): fleet-role resume, or swap --override %s",
						pa.By, pa.At.Format(time.RFC3339), pa.Reason, api.OverridePause)
				}
				req = api.ManualRequest{Out: out, In: in, At: time.Now().UTC().Truncate(time.Second), By: by, Overrides: overrides}
				return writeRequest(ctx, client, cfg.Namespace, cm, req)
			})
			if statusChanged(err) {
				return errors.New("the status kept changing while the request was written: run the command again")
			}
			if err != nil {
				return err
			}
			past := ""
			if len(req.Overrides) > 0 {
				past = ", past: " + strings.Join(req.Overrides, ", ")
			}
			if !wait {
				fmt.Fprintf(cmd.OutOrStdout(), "requested: swap %s out for %s in (by %s at %s%s); follow it with fleet-role status --watch\n",
					out, in, req.By, req.At.Format(time.RFC3339), past)
				return nil
			}
			fmt.Fprintf(cmd.OutOrStdout(), "requested: swap %s out for %s in (by %s at %s%s); waiting for its end\n",
				out, in, req.By, req.At.Format(time.RFC3339), past)
			return waitForSwap(cmd.Context(), cmd.OutOrStdout(), client, cfg.Namespace, req, timeout)
		},
	}
	cmd.Flags().StringSliceVar(&overrides, "override", nil, "start past this refusal, and only this one: pause, holds or domains (again, or comma-separated, for more)")
	_ = cmd.RegisterFlagCompletionFunc("override", completeOverrides)
	cmd.Flags().BoolVar(&force, "force", false, "gone: name the refusals to pass with --override pause, holds, domains")
	_ = cmd.Flags().MarkHidden("force")
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "write nothing: say whether the swap would start now, or what holds or refuses it, and the steps it would take")
	cmd.Flags().StringVarP(&output, "output", "o", "", "with --dry-run: json or yaml (default: text)")
	completeOutput(cmd, "json", "yaml")
	cmd.Flags().BoolVar(&cancelSwap, "cancel", false, "take the swap under way back, if its outgoing voter has not stepped down")
	cmd.Flags().BoolVar(&wait, "wait", false, "wait for the swap's end and exit by it: 0 completed, 3 rolled back, 4 abandoned, 5 pending, 6 --timeout ran out")
	cmd.Flags().DurationVar(&timeout, "timeout", time.Hour, "how long --wait waits (0: until the end)")
	o.add(cmd)
	cmd.ValidArgsFunction = completeSwap(&o)
	return cmd
}

// errForce is the usage error of --force: it passed the pause, the holds
// and the failure-domain refusal at once, a hammer a reader of the history
// could not tell from a chisel; each is named now.
var errForce = fmt.Errorf("--force is gone: name each refusal to start past, and only those: "+
	"--override %s (the controller is paused), --override %s (a hold is in force), --override %s (a majority of the voters in one failure domain); "+
	"fleet-role swap --dry-run OUT IN says which hold the swap now",
	api.OverridePause, api.OverrideHolds, api.OverrideDomains)

// cancelTheSwap writes cancel.json naming the swap under way, once
// swapplan.CheckCancel lets it.
func cancelTheSwap(cmd *cobra.Command, o *clusterOptions) error {
	cfg, client, err := o.open()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(cmd.Context(), 30*time.Second)
	defer cancel()
	by := whoAmI(ctx, client)
	var c api.Cancel
	var rec *api.SwapRecord
	var withdrawn *api.ManualRequest
	err = retry.OnError(retry.DefaultRetry, statusChanged, func() error {
		snap, cm, err := readCluster(ctx, client, cfg)
		if err != nil {
			return err
		}
		withdrawn = nil
		if rec, err = swapplan.CheckCancel(snap); err != nil {
			// No swap under way: a request that has not started one is
			// withdrawn.
			if q := swapplan.PendingRequest(snap); q != nil && rec == nil {
				withdrawn = q
				return setStatusKey(ctx, client, cfg.Namespace, cm, api.RequestKey, "")
			}
			return fmt.Errorf("refused: %w", err)
		}
		c = api.Cancel{Swap: rec.ID, By: by, At: time.Now().UTC().Truncate(time.Second)}
		b, err := json.Marshal(c)
		if err != nil {
			return err
		}
		return setStatusKey(ctx, client, cfg.Namespace, cm, api.CancelKey, string(b))
	})
	if statusChanged(err) {
		return errors.New("the status kept changing while the cancel was written: run the command again")
	}
	if err != nil {
		return err
	}
	if q := withdrawn; q != nil {
		fmt.Fprintf(cmd.OutOrStdout(), "withdrawn: %s's request to swap %s for %s (at %s), which had started no swap\n", q.By, q.Out, q.In, q.At.Format(time.RFC3339))
		return nil
	}
	fmt.Fprintf(cmd.OutOrStdout(), "cancel requested: swap %s (%s out, %s in) is taken back from where it is (by %s); follow it with fleet-role status --watch\n",
		rec.ID, rec.Out, rec.In, c.By)
	return nil
}

// readCluster reads what a check needs: the Nodes, the kubelets'
// heartbeats, the regrade Lease and the status ConfigMap.
func readCluster(ctx context.Context, client kubernetes.Interface, cfg config.Controller) (swapplan.Snapshot, *corev1.ConfigMap, error) {
	return readClusterAt(ctx, client, cfg, time.Now())
}

// readClusterAt is readCluster with the snapshot's time given.
func readClusterAt(ctx context.Context, client kubernetes.Interface, cfg config.Controller, now time.Time) (swapplan.Snapshot, *corev1.ConfigMap, error) {
	var in adapt.Input
	nodes, err := client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return swapplan.Snapshot{}, nil, fmt.Errorf("list nodes: %w", err)
	}
	for i := range nodes.Items {
		in.Nodes = append(in.Nodes, &nodes.Items[i])
	}
	beats, err := client.CoordinationV1().Leases(api.NodeLeaseNamespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return swapplan.Snapshot{}, nil, fmt.Errorf("list the kubelets' leases: %w", err)
	}
	for i := range beats.Items {
		in.NodeLeases = append(in.NodeLeases, &beats.Items[i])
	}
	lease, err := client.CoordinationV1().Leases(cfg.Namespace).Get(ctx, api.LeaseName, metav1.GetOptions{})
	switch {
	case err == nil:
		in.Lease = lease
	case !apierrors.IsNotFound(err):
		return swapplan.Snapshot{}, nil, fmt.Errorf("read the Lease %s/%s: %w", cfg.Namespace, api.LeaseName, err)
	}
	cm, err := client.CoreV1().ConfigMaps(cfg.Namespace).Get(ctx, api.StatusConfigMap, metav1.GetOptions{})
	switch {
	case err == nil:
		in.Status = cm
	case apierrors.IsNotFound(err):
		cm = nil
	default:
		return swapplan.Snapshot{}, nil, fmt.Errorf("read %s/%s: %w", cfg.Namespace, api.StatusConfigMap, err)
	}
	snap, _ := adapt.Build(in, controller.PlanConfig(cfg), labels.Nothing(), now)
	return snap, cm, nil
}

func writeRequest(ctx context.Context, client kubernetes.Interface, ns string, cm *corev1.ConfigMap, req api.ManualRequest) error {
	b, err := json.Marshal(req)
	if err != nil {
		return err
	}
	if err := setStatusKey(ctx, client, ns, cm, api.RequestKey, string(b)); err != nil {
		return fmt.Errorf("write the request: %w", err)
	}
	return nil
}

// setStatusKey sets a key of the status ConfigMap as read (cm, nil when
// there was none), or deletes it when value is "": an update on condition
// of the version read, or a create that fails if the controller created
// the ConfigMap meanwhile. Either failure is read, checked and written
// again by the caller (statusChanged).
func setStatusKey(ctx context.Context, client kubernetes.Interface, ns string, cm *corev1.ConfigMap, key, value string) error {
	var err error
	switch {
	case cm == nil && value == "":
		return nil
	case cm == nil:
		cm = &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: api.StatusConfigMap},
			Data: map[string]string{key: value}}
		_, err = client.CoreV1().ConfigMaps(ns).Create(ctx, cm, metav1.CreateOptions{})
	default:
		cm = cm.DeepCopy()
		if cm.Data == nil {
			cm.Data = map[string]string{}
		}
		if value == "" {
			delete(cm.Data, key)
		} else {
			cm.Data[key] = value
		}
		_, err = client.CoreV1().ConfigMaps(ns).Update(ctx, cm, metav1.UpdateOptions{})
	}
	return err
}

// statusChanged says the status ConfigMap changed between a read and the
// write that was based on it.
func statusChanged(err error) bool {
	return apierrors.IsConflict(err) || apierrors.IsAlreadyExists(err)
}

// whoAmI is who the API server says the caller is (a SelfSubjectReview,
// as kubectl auth whoami asks), for the records of who asked: a
// kubeconfig's user, a ServiceAccount. Where the API server does not
// answer it, the local user and host, marked as unverified.
func whoAmI(ctx context.Context, client kubernetes.Interface) string {
	r, err := client.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err == nil && r.Status.UserInfo.Username != "" {
		return r.Status.UserInfo.Username
	}
	user := os.Getenv("USER")
	if user == "" {
		user = "unknown"
	}
	host, _ := os.Hostname()
	return user + "@" + host + " (unverified)"
}
