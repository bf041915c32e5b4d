package ffriver_test

import (
	"os/exec"
	"strings"
	"testing"
)

// An application that embeds ffriver and does not meter links no
// OpenTelemetry SDK: only package metricviews (the views a metering
// application gives its MeterProvider) imports it; the API is enough for
// everything else.
func TestNoOpenTelemetrySDKWithoutMetering(t *testing.T) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("the go command is not on PATH")
	}
	pkgs := []string{".", "./executions", "./runner", "./subscribe", "./workers", "./scanners", "./migrations", "./jobs", "./fftest"}
	out, err := exec.Command(goBin, append([]string{"list", "-deps"}, pkgs...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps: %v\n%s", err, out)
	}
	for _, dep := range strings.Fields(string(out)) {
		if strings.HasPrefix(dep, "go.opentelemetry.io/otel/sdk") {
			t.Errorf("%v depend on %s: an application that does not meter would link the SDK", pkgs, dep)
		}
	}
	out, err = exec.Command(goBin, "list", "-deps", "./metricviews").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "go.opentelemetry.io/otel/sdk/metric\n") {
		t.Errorf("metricviews should import the SDK's metric package: %v\n%s", err, out)
	}
}
