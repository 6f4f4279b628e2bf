// podpost creates Pods through client-go, the client Kubernetes' own controllers use, and prints one
// JSON line per create: the Pod's name, the wall-clock time the create started (Unix ns) and how long
// the create took until its response was decoded (ns). bench/podpost.py builds and drives it, and posts
// the same Pod from the operator's own Python client in between, so the two clients are compared on
// one apiserver, one Pod and one watch. Not a test; not part of the operator.
//
// Built with the control-plane wrapper module's go.mod (no module of its own to keep in step):
//
//	go build -modfile=../../e2e/controlplane/k8s/go.mod -o podpost .
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

func main() {
	server := flag.String("server", "", "apiserver URL")
	ca := flag.String("ca", "", "CA file")
	cert := flag.String("cert", "", "client certificate")
	key := flag.String("key", "", "client key")
	namespace := flag.String("namespace", "", "namespace to create the Pods in")
	podFile := flag.String("pod", "", "the Pod manifest (JSON)")
	prefix := flag.String("prefix", "", "Pod name prefix; names are <prefix>-<i>")
	count := flag.Int("n", 20, "Pods to create")
	warmup := flag.Int("warmup", 3, "Pods to create first, not reported")
	wire := flag.String("wire", "json", "request body encoding: json or protobuf")
	flag.Parse()

	contentType := map[string]string{"json": "application/json", "protobuf": "application/vnd.kubernetes.protobuf"}[*wire]
	if contentType == "" {
		fail(fmt.Errorf("-wire must be json or protobuf, not %q", *wire))
	}
	cfg := &rest.Config{Host: *server, TLSClientConfig: rest.TLSClientConfig{CAFile: *ca, CertFile: *cert, KeyFile: *key},
		QPS: -1} // no client-side rate limit: one create at a time, the apiserver's time is what is measured
	cfg.ContentType = contentType
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		fail(err)
	}
	raw, err := os.ReadFile(*podFile)
	if err != nil {
		fail(err)
	}
	var template corev1.Pod
	if err := json.Unmarshal(raw, &template); err != nil {
		fail(err)
	}
	pods := client.CoreV1().Pods(*namespace)
	out := json.NewEncoder(os.Stdout)
	for i := -*warmup; i < *count; i++ {
		pod := template.DeepCopy()
		pod.Name = fmt.Sprintf("%s-%d", *prefix, i+*warmup)
		start := time.Now()
		if _, err := pods.Create(context.Background(), pod, metav1.CreateOptions{}); err != nil {
			fail(err)
		}
		took := time.Since(start)
		if i >= 0 {
			if err := out.Encode(map[string]any{"name": pod.Name, "start_ns": start.UnixNano(), "post_ns": took.Nanoseconds()}); err != nil {
				fail(err)
			}
		}
		time.Sleep(20 * time.Millisecond) // the same pause as the Python side: one create in flight at a time
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "podpost:", err)
	os.Exit(1)
}
