package config

import (
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestTheDefaultControllerConfigurationIsAcceptedAndEqualsTheDefaults(t *testing.T) {
	c, err := ParseController(DefaultControllerTOML())
	require.NoError(t, err)
	assert.Equal(t, DefaultController(), c)
}

func TestAMinimalControllerConfigurationTakesTheDefaults(t *testing.T) {
	c, err := ParseController([]byte("version = 1\n"))
	require.NoError(t, err)
	assert.Equal(t, DefaultController(), c)
}

func TestDurationsAreStrings(t *testing.T) {
	c, err := ParseController([]byte("version = 1\ncooldown = \"90s\"\n[bounds]\njoin = \"1h30m\"\n"))
	require.NoError(t, err)
	assert.Equal(t, 90*time.Second, c.Cooldown)
	assert.Equal(t, 90*time.Minute, c.Bounds.Join)
}

func TestBadControllerConfigurations(t *testing.T) {
	for _, tc := range []struct {
		name string
		toml string
		want []string
	}{
		{"an unknown key is named with its line", "version = 1\n\n[bounds]\nsnapshott = \"1m\"\n", []string{`line 4: unknown key "bounds.snapshott"`}},
		{"an unknown top-level key is named", "version = 1\ndryrun = false\n", []string{`line 2: unknown key "dryrun"`}},
		{"a missing version is named", "dry_run = false\n", []string{"version: must be 1, got 0"}},
		{"a bad duration is named with its key and line", "version = 1\nperiod = \"ten\"\n", []string{`line 2: key "period"`, "ten"}},
		{"a wrong type is named", "version = 1\ndry_run = \"no\"\n", []string{"dry_run"}},
		{"every problem is reported at once", "version = 2\nnamespace = \"Bad_NS\"\n[bounds]\njoin = \"0s\"\nrollback = \"-1m\"\n",
			[]string{"version: must be 1", "namespace:", "bounds.join:", "bounds.rollback:"}},
		{"a join bound shorter than k3s's 15 s learner tick is refused, naming the tick", "version = 1\n[bounds]\njoin = \"14s\"\n",
			[]string{"bounds.join: must be at least k3s's learner tick, 15s, at which alone it promotes a learner; got 14s"}},
		{"a removal fallback of zero is refused, by key", "version = 1\n[bounds]\nremove_fallback = \"0s\"\nremove_by_voter = \"-1s\"\n",
			[]string{"bounds.remove_fallback:", "bounds.remove_by_voter:"}},
		{"a runners bound action other than wait or drain is named", "version = 1\nrunners_bound_action = \"kill\"\n",
			[]string{`runners_bound_action: must be "wait" or "drain", got "kill"`}},
		{"a bad selector is named", "version = 1\nrunner_selector = \"a b c\"\n", []string{"runner_selector:"}},
		{"a lease shorter than two periods is refused", "version = 1\nperiod = \"1m\"\nlease_duration = \"1m\"\n", []string{"lease_duration:"}},
		{"malformed TOML says the line", "version = 1\n[bounds\n", []string{"line 3", "table name"}},
		{"a notification backoff of zero, a limit under it and an empty queue are refused, by key",
			"version = 1\n[notify]\nretry_backoff = \"0s\"\nmax_retry_backoff = \"-1s\"\nmax_queued = 0\n",
			[]string{"notify.retry_backoff:", "notify.max_retry_backoff: must be at least retry_backoff", "notify.max_queued:"}},
		{"a notification backoff limit under the backoff is refused", "version = 1\n[notify]\nretry_backoff = \"1m\"\nmax_retry_backoff = \"30s\"\n",
			[]string{"notify.max_retry_backoff: must be at least retry_backoff (1m0s), got 30s"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseController([]byte(tc.toml))
			require.Error(t, err)
			assert.True(t, errors.Is(err, ErrInvalid))
			for _, w := range tc.want {
				assert.Contains(t, err.Error(), w)
			}
		})
	}
}

func TestDeadVotersAreNotReplacedAndASwapWaitsForItsRunnersPastTheirBoundUnlessToldOtherwise(t *testing.T) {
	c := DefaultController()
	assert.False(t, c.ReplaceDeadVoters)
	assert.Equal(t, RunnersBoundWait, c.RunnersBoundAction)
	c, err := ParseController([]byte("version = 1\nreplace_dead_voters = true\nrunners_bound_action = \"drain\"\n"))
	require.NoError(t, err)
	assert.True(t, c.ReplaceDeadVoters)
	assert.Equal(t, RunnersBoundDrain, c.RunnersBoundAction)
}

func TestLoadControllerNamesAMissingFile(t *testing.T) {
	_, err := LoadController(filepath.Join(t.TempDir(), "nope.toml"))
	require.ErrorIs(t, err, ErrInvalid)
	assert.Contains(t, err.Error(), "nope.toml")
}

func TestLoadControllerReadsAFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "c.toml")
	require.NoError(t, os.WriteFile(path, []byte("version = 1\ndry_run = false\n"), 0o644))
	c, err := LoadController(path)
	require.NoError(t, err)
	assert.False(t, c.DryRun)
}

func TestTheRemovalBoundsAreRead(t *testing.T) {
	c, err := ParseController([]byte("version = 1\n[bounds]\nremove_fallback = \"3m\"\nremove_by_voter = \"7m\"\n"))
	require.NoError(t, err)
	assert.Equal(t, 3*time.Minute, c.Bounds.RemoveFallback)
	assert.Equal(t, 7*time.Minute, c.Bounds.RemoveByVoter)
	assert.Equal(t, 2*time.Minute, DefaultController().Bounds.RemoveFallback)
}

func TestTheMaintenanceWindowIsReadAndItsMistakesNamed(t *testing.T) {
	c, err := ParseController([]byte("version = 1\n[maintenance_window]\ndays = [\"Mon\", \"fri\"]\nstart = \"22:30\"\nend = \"04:00\"\ntime_zone = \"Europe/Berlin\"\n"))
	require.NoError(t, err)
	days, start, end, loc, err := c.MaintenanceWindow.Parse()
	require.NoError(t, err)
	assert.Equal(t, [7]bool{false, true, false, false, false, true, false}, days)
	assert.Equal(t, 22*time.Hour+30*time.Minute, start)
	assert.Equal(t, 4*time.Hour, end)
	assert.Equal(t, "Europe/Berlin", loc.String())

	for conf, want := range map[string]string{
		"days = [\"someday\"]":      `maintenance_window: "someday" is not a day`,
		"start = \"25:00\"":         `maintenance_window: "25:00" is not a time of day`,
		"time_zone = \"Mars/Base\"": `maintenance_window: time zone "Mars/Base"`,
	} {
		_, err := ParseController([]byte("version = 1\n[maintenance_window]\n" + conf + "\n"))
		assert.ErrorContains(t, err, want)
	}
}

func TestTheHoldsAreReadAndTheirMistakesNamed(t *testing.T) {
	c, err := ParseController([]byte("version = 1\n[holds]\nkured_daemonset = \"kube-system/kured\"\nupgrade_plans_namespace = \"system-upgrade\"\nprometheus_url = \"http://prometheus.monitoring:9090\"\nalert_filter_regexp = \"^Etcd\"\nalert_filter_match_only = true\n[notify]\nurls = [\"generic://hooks.example.org/fleet\"]\n"))
	require.NoError(t, err)
	ns, name := c.Holds.KuredDaemonSetName()
	assert.Equal(t, "kube-system", ns)
	assert.Equal(t, "kured", name)
	assert.Equal(t, DefaultKuredLockAnnotation, c.Holds.KuredLockAnnotation)
	assert.Equal(t, []string{"generic://hooks.example.org/fleet"}, c.Notify.URLs)

	for conf, want := range map[string]string{
		"kured_daemonset = \"kured\"":                             `holds.kured_daemonset: "kured" is not "namespace/name"`,
		"kured_daemonset = \"a/b\"\nkured_lock_annotation = \"\"": `holds.kured_lock_annotation: must name`,
		"upgrade_plans_namespace = \"System_Upgrade\"":            `holds.upgrade_plans_namespace: "System_Upgrade" is not a valid namespace name`,
		"prometheus_url = \"prometheus:9090\"":                    `holds.prometheus_url: "prometheus:9090" is not an http(s) URL`,
		"alert_filter_regexp = \"(\"":                             `holds.alert_filter_regexp: error parsing regexp`,
		"alert_ignore_regexp = \"[\"":                             `holds.alert_ignore_regexp: error parsing regexp`,
	} {
		_, err := ParseController([]byte("version = 1\n[holds]\n" + conf + "\n"))
		assert.ErrorContains(t, err, want)
		assert.ErrorIs(t, err, ErrInvalid)
	}
}

func TestWatchdogInfoInhibitorAndFleetRolesOwnAlertsAreIgnoredUnlessToldAndAnEmptyIgnoreIgnoresNone(t *testing.T) {
	c, err := ParseController([]byte("version = 1\n[holds]\nprometheus_url = \"http://prometheus.monitoring:9090\"\n"))
	require.NoError(t, err)
	assert.Equal(t, DefaultAlertIgnoreRegexp, c.Holds.AlertIgnoreRegexp)
	assert.True(t, c.Holds.AlertIgnoreOutgoing)
	re := regexp.MustCompile(c.Holds.AlertIgnoreRegexp)
	for _, name := range []string{"Watchdog", "InfoInhibitor", "FleetRoleSwapStuck", "FleetRoleHoldLong"} {
		assert.True(t, re.MatchString(name), name)
	}
	for _, name := range []string{"etcdNoLeader", "WatchdogDown", "KubeNodeNotReady", "MyFleetRoleAlert"} {
		assert.False(t, re.MatchString(name), name)
	}

	c, err = ParseController([]byte("version = 1\n[holds]\nprometheus_url = \"http://prometheus.monitoring:9090\"\nalert_ignore_regexp = \"\"\nalert_ignore_outgoing = false\n"))
	require.NoError(t, err)
	assert.Empty(t, c.Holds.AlertIgnoreRegexp)
	assert.False(t, c.Holds.AlertIgnoreOutgoing)
}

func TestKuredsLockAndThePlansAreWatchedByDefaultAndOffOnlyWhenSaidOff(t *testing.T) {
	def := DefaultController().Holds
	assert.False(t, def.KuredOff(), "kured's lock is watched by default, its DaemonSet found by itself")
	assert.False(t, def.UpgradesOff(), "the Plans are watched by default, in every namespace")
	require.NoError(t, DefaultController().Validate())

	c, err := ParseController([]byte("version = 1\n[holds]\nkured_daemonset = \"off\"\nkured_lock_annotation = \"\"\nupgrade_plans_namespace = \"off\"\n"))
	require.NoError(t, err, "a lock annotation is not needed where kured is off")
	assert.True(t, c.Holds.KuredOff())
	assert.True(t, c.Holds.UpgradesOff())
	ns, name := c.Holds.KuredDaemonSetName()
	assert.Empty(t, ns+name)

	_, err = ParseController([]byte("version = 1\n[holds]\nkured_lock_annotation = \"\"\n"))
	assert.ErrorContains(t, err, "holds.kured_lock_annotation: must name", "kured found by itself needs its lock annotation")
	_, err = ParseController([]byte("version = 1\n[holds]\nkured_daemonset = \"Off\"\n"))
	assert.ErrorContains(t, err, `holds.kured_daemonset: "Off" is not "namespace/name", "" (found by itself) or "off"`)
}
