# fleet-role: `make help` lists the targets.
SHELL := bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

GO          ?= go
BIN         ?= bin
STATICCHECK ?= honnef.co/go/tools/cmd/staticcheck@v0.8.2
NFPM        ?= github.com/goreleaser/nfpm/v2/cmd/nfpm@v2.45.2
GREMLINS    ?= github.com/go-gremlins/gremlins/cmd/gremlins@v0.6.0
# The pure packages whose gates the mutation tests break (make mutate).
MUTATE_PKGS ?= swapplan role
TESTFLAGS   ?=
TESTLOG     ?= $(BIN)/test.log
NOW         ?= 2026-11-30T12:00:00Z
FUZZTIME    ?= 60s
# The real k3s binary the real-k3s tier of tests/e2e runs: the one
# .ci/setup (make setup) keeps in its cache unless given; without one the
# tier skips, saying how to get one (under CI=true it fails).
FLEET_ROLE_K3S ?= $(lastword $(wildcard $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/fleet-role/k3s/*/k3s))
export FLEET_ROLE_K3S
# The fuzz targets, package:target: every input the agent and the
# controller read from outside (docs/testing.md#fuzzing).
FUZZ_TARGETS = api:FuzzRoleFile api:FuzzWireDocuments \
	controller/adapt:FuzzPlanInput controller/adapt:FuzzNodeAnnotations \
	controller/adapt:FuzzStatusConfigMap controller/adapt:FuzzLease \
	config:FuzzAgentConfig config:FuzzControllerConfig
# The version from the git tags (packaging/version.sh: v0.3.0 is 0.3.0, a
# pre-release v0.4.0-rc.1 is 0.4.0~rc.1), the commit and the build date,
# linked into the binary (fleet-role --version) and carried by the packages.
# The build date is the commit's (in UTC), not the clock's: one commit
# builds one binary, byte for byte, and so one image under its one tag;
# a second make image of it leaves the image a host was given unchanged.
# Note: each is read once per make run (:=), so that the binary, the
# packages and the image of one run carry the same version however long
# the run takes (a commit meanwhile would change it).
ifndef VERSION
VERSION     := $(shell packaging/version.sh)
endif
ifndef COMMIT
COMMIT      := $(shell git rev-parse HEAD 2>/dev/null)
endif
ifndef BUILD_DATE
BUILD_DATE  := $(shell TZ=UTC git log -1 --format=%cd --date=format-local:%Y-%m-%dT%H:%M:%SZ 2>/dev/null)
endif
LDFLAGS     = -s -w -X main.version=$(VERSION) -X main.commit=$(COMMIT) -X main.date=$(BUILD_DATE)
# An image tag has neither "~" nor "+".
IMAGE_TAG   = $(subst +,-,$(subst ~,-,$(VERSION)))
# helm, the version go.mod names (the tests render the chart with its
# library): the Ansible role renders the chart with it.
HELM_VERSION = $(shell $(GO) list -m -f '{{.Version}}' helm.sh/helm/v3)

.PHONY: help setup build image image-tag package helm chart manifests test test-e2e test-ansible bench fuzz mutate lint fmt demo demo-plan test-bins clean

help: ## list the targets
	@awk 'BEGIN {FS = ":.*## "} /^[a-z-]+:.*## / {printf "  %-12s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

build: ## build the static binary into bin/fleet-role
	@[ -n "$(VERSION)" ] || { echo "make: no version: packaging/version.sh failed" >&2; exit 1; }
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags "$(LDFLAGS)" -o $(BIN)/fleet-role ./cmd/fleet-role

image: build ## build the controller's image FROM scratch (no registry): fleet-role:$(IMAGE_TAG), never a latest
	docker build -q -f packaging/Dockerfile -t fleet-role:$(IMAGE_TAG) $(BIN)

image-tag: ## print the tag make image gives the controller's image (the version, without "~" or "+")
	@echo $(IMAGE_TAG)

package: build ## build the .deb and the .rpm into bin/ with nfpm
	@sed 's|src: bin/fleet-role$$|src: $(BIN)/fleet-role|' packaging/nfpm.yaml >$(BIN)/nfpm.yaml
	@for p in deb rpm; do \
		FLEET_ROLE_VERSION=$(VERSION) $(GO) run $(NFPM) package -f $(BIN)/nfpm.yaml -p $$p -t $(BIN)/; \
	done

helm: ## build helm, the version go.mod names, into bin/helm, with which the Ansible role renders the chart
	GOBIN=$(abspath $(BIN)) $(GO) install -ldflags "-X helm.sh/helm/v3/internal/version.version=$(HELM_VERSION)" helm.sh/helm/v3/cmd/helm@$(HELM_VERSION)

chart: helm ## package the chart into bin/, its appVersion (the image's default tag) fleet-role's version
	$(BIN)/helm package packaging/helm/fleet-role --app-version $(IMAGE_TAG) -d $(BIN)

manifests: helm ## render the chart into bin/fleet-role.yaml for kubectl apply -f, its image fleet-role:$(IMAGE_TAG)
	$(BIN)/helm template fleet-role packaging/helm/fleet-role -n fleet-role --set namespace.create=true --set image.tag=$(IMAGE_TAG) >$(BIN)/fleet-role.yaml

# Note: the two longest packages (tests/ansible, tests/controller) are
# named first, so that go test starts them first and the others run beside
# them rather than before them: the first part then takes about as long
# as tests/controller alone. The real-k3s tier of tests/e2e runs beside
# everything else, from the start: it is the longest path. Its hosts leave
# about a third of the machine idle, and real k3s runs at its own 5 s
# election timeout with the probe's limits raised for a shared disk. The
# other end-to-end scenarios (the double's fleets, whose etcd elects at
# k3s's 5 s and whose write oracles hold every write to that) run after the
# first part, beside the real tier's scenarios before its slowed disks.
# Those, which measure the stalls one slow host causes its peers, wait
# until everything beside them has finished (FLEET_ROLE_E2E_ALONE_AFTER,
# a file written then), since the hosts' disks are this machine's one
# disk, whose other load stalls every host at once.
SLOW_PKGS := /tests/(ansible|controller)$$
REAL_K3S  := ^TestOnRealK3s$$
# The fitness tests on real etcd judge etcd's own fsync and commit
# latencies against etcd's guidance (10 and 25 ms): with other tests
# beside them a shared machine's disk is over it on its own, so they run
# alone, last (daemon/fitness_test.go).
QUIET     := ^(TestAVoterOnAHostAsBusyAsARunnerWhoseEtcdIsWithinItsLimitsIsNotJudgedUnfitOverAFullWindow|TestAVoterWhoseDiskIsMadeSlowIsJudgedUnfitWithinAWindow)$$
test: ## run every test, the end-to-end scenarios last, printing each result and the totals
	@mkdir -p $(BIN)
	@status=0; pkgs=$$($(GO) list ./... | grep -v /tests/e2e); beside=$(abspath $(BIN))/beside-real-k3s.done; rm -f $$beside; \
	FLEET_ROLE_E2E_ALONE_AFTER=$$beside $(GO) test -count=1 -v -timeout 75m $(TESTFLAGS) -run '$(REAL_K3S)' ./tests/e2e >$(TESTLOG).k3s 2>&1 & k3s=$$!; \
	$(GO) test -count=1 -v -timeout 45m $(TESTFLAGS) -skip '$(QUIET)' $$(grep -E '$(SLOW_PKGS)' <<<"$$pkgs") $$(grep -vE '$(SLOW_PKGS)' <<<"$$pkgs") >$(TESTLOG) 2>&1 || status=$$?; \
	$(GO) test -count=1 -v -timeout 60m $(TESTFLAGS) -skip '$(REAL_K3S)' ./tests/e2e >$(TESTLOG).e2e 2>&1 || status=$$?; \
	touch $$beside; \
	wait $$k3s || status=$$?; cat $(TESTLOG).k3s $(TESTLOG).e2e >>$(TESTLOG); rm -f $(TESTLOG).k3s $(TESTLOG).e2e; \
	$(GO) test -count=1 -v -timeout 10m $(TESTFLAGS) -run '$(QUIET)' ./daemon >>$(TESTLOG) 2>&1 || status=$$?; \
	grep -E '^\s*--- (PASS|FAIL|SKIP)|^(ok|FAIL|panic:)|^\s+\S+_test\.go:[0-9]+:|^\s+(Error|Messages):' $(TESTLOG) || true; \
	[ $$status -eq 0 ] || { echo "== why the failed tests failed"; awk -f .ci/failures.awk $(TESTLOG) | tail -n 250; }; \
	echo "tests: $$(grep -cE '^\s*--- PASS' $(TESTLOG)) passed, $$(grep -cE '^\s*--- FAIL' $(TESTLOG)) failed, $$(grep -cE '^\s*--- SKIP' $(TESTLOG)) skipped (full log: $(TESTLOG))"; \
	exit $$status

test-e2e: ## the end-to-end scenarios on a simulated fleet of containers over real etcd
	$(GO) test -count=1 -v -timeout 80m ./tests/e2e

test-ansible: ## the Ansible roles' tests: lint, a prefix, a systemd host, the real API server, the package
	$(GO) test -count=1 -v -timeout 45m ./tests/ansible

bench: ## run the planner's benchmarks, whose figures stand in docs/figures.md
	$(GO) test -run XXX -bench . -benchtime 2s ./swapplan

# Note: go test takes one -fuzz target per run. Minimizing a new input is
# capped at 200 runs: on the ConfigMap's large seeds Go's fuzzer otherwise
# spends its whole minimizing time (60s) on one, finding nothing meanwhile.
# A run that fails having written no failing input under testdata/fuzz is
# run once more: Go 1.26's fuzzing coordinator can fail a target with
# "context deadline exceeded" as -fuzztime ends (golang/go#75804, fixed in
# Go 1.27); a failing input found is never retried.
fuzz: ## fuzz every input read from outside, each target for FUZZTIME (60s)
	@for t in $(FUZZ_TARGETS); do \
		p=$${t%%:*}; f=$${t#*:}; corpus=$$p/testdata/fuzz/$$f; \
		echo "== $$f ($(FUZZTIME))"; \
		before=$$(ls $$corpus 2>/dev/null | wc -l || true); \
		$(GO) test -run XXX -fuzz "^$$f\$$" -fuzztime $(FUZZTIME) -fuzzminimizetime 200x ./$$p && continue; \
		if [ "$$(ls $$corpus 2>/dev/null | wc -l || true)" != "$$before" ]; then exit 1; fi; \
		echo "== $$f failed with no failing input written (golang/go#75804): once more"; \
		$(GO) test -run XXX -fuzz "^$$f\$$" -fuzztime $(FUZZTIME) -fuzzminimizetime 200x ./$$p; \
	done

# Note: gremlins' default mutators and the stronger ones; each mutant is
# run against its package's own tests. Gremlins leaves untested the
# mutants of a tagless switch's case conditions, which Go's coverage
# profile puts in no block; tests/mutate runs those through the tests
# too (docs/testing.md, Mutation testing). The last two lines per package
# are the figures docs/figures.md keeps.
mutate: ## mutation testing of the pure packages (MUTATE_PKGS) with gremlins: mutants covered and killed, per package
	@mkdir -p $(BIN)
	@for p in $(MUTATE_PKGS); do \
		echo "== $$p"; \
		$(GO) run $(GREMLINS) unleash --invert-assignments --invert-logical --remove-self-assignments \
			--workers 2 --timeout-coefficient 10 --output $(BIN)/mutate-$$p.json ./$$p >$(BIN)/mutate-$$p.log; \
		grep -E 'LIVED|TIMED OUT' $(BIN)/mutate-$$p.log || true; \
		$(GO) run ./tests/mutate -report $(BIN)/mutate-$$p.json ./$$p | tee -a $(BIN)/mutate-$$p.log | grep -vE '^ +KILLED'; \
	done

lint: ## gofmt, go vet and staticcheck
	@out=$$(gofmt -l .); if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	$(GO) run $(STATICCHECK) ./...

fmt: ## format the code
	gofmt -w .

setup: ## set up a fresh machine for make test and make demo: Docker, Debian's packages, the test images and binaries
	bash .ci/setup

demo: setup ## fleet-role on a local fleet of containers, on real k3s where setup found it (else over real etcd; without Docker, simulated hosts): a voter turns slow and is swapped out
	$(GO) run ./tests/demo

demo-plan: build ## plan the example clusters of docs/examples, as an operator would
	@for f in docs/examples/*.json; do \
		echo "== $(BIN)/fleet-role plan -f $$f --at $(NOW) -o text"; \
		$(BIN)/fleet-role plan -f $$f --at $(NOW) -o text; echo; \
	done

test-bins: ## build the real kube-apiserver and etcd for the integration tests (cached outside the repo)
	tests/testbins/build-k8s-bins.sh

clean: ## remove bin/
	rm -rf $(BIN)
