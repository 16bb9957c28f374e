// psa-check: evaluates the pod templates of rendered manifests (stdin, multi-document YAML)
// against a Pod Security Standards level with upstream's own evaluator
// (k8s.io/pod-security-admission/policy, what the API server's PodSecurity admission runs).
// Prints each failing check and exits 1 if any workload fails; 2 on bad input.
package main

import (
	"bufio"
	"bytes"
	"flag"
	"fmt"
	"io"
	"os"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/pod-security-admission/api"
	"k8s.io/pod-security-admission/policy"
	"sigs.k8s.io/yaml"
)

func main() {
	level := flag.String("level", "restricted", "privileged, baseline or restricted")
	version := flag.String("version", "latest", "the standards' version, e.g. v1.34 or latest")
	flag.Parse()
	lv, err := api.ParseLevel(*level)
	if err != nil {
		fail(err)
	}
	ver, err := api.ParseVersion(*version)
	if err != nil {
		fail(err)
	}
	evaluator, err := policy.NewEvaluator(policy.DefaultChecks())
	if err != nil {
		fail(err)
	}
	reader := utilyaml.NewYAMLReader(bufio.NewReader(os.Stdin))
	checked, failed := 0, 0
	for {
		doc, err := reader.Read()
		if err == io.EOF {
			break
		}
		if err != nil {
			fail(err)
		}
		if len(bytes.TrimSpace(doc)) == 0 {
			continue
		}
		var head struct {
			Kind     string            `json:"kind"`
			Metadata metav1.ObjectMeta `json:"metadata"`
		}
		if err := yaml.Unmarshal(doc, &head); err != nil {
			fail(err)
		}
		meta, spec, err := podOf(head.Kind, doc)
		if err != nil {
			fail(err)
		}
		if spec == nil {
			continue
		}
		checked++
		for _, r := range evaluator.EvaluatePod(api.LevelVersion{Level: lv, Version: ver}, meta, spec) {
			if !r.Allowed {
				failed++
				fmt.Printf("%s/%s: %s: %s\n", head.Kind, head.Metadata.Name, r.ForbiddenReason, r.ForbiddenDetail)
			}
		}
	}
	fmt.Printf("%d workloads checked against %s:%s, %d failing checks\n", checked, *level, *version, failed)
	if failed > 0 {
		os.Exit(1)
	}
}

func podOf(kind string, doc []byte) (*metav1.ObjectMeta, *corev1.PodSpec, error) {
	switch kind {
	case "Pod":
		var o corev1.Pod
		err := yaml.UnmarshalStrict(doc, &o)
		return &o.ObjectMeta, &o.Spec, err
	case "Deployment":
		var o appsv1.Deployment
		err := yaml.UnmarshalStrict(doc, &o)
		return &o.Spec.Template.ObjectMeta, &o.Spec.Template.Spec, err
	case "StatefulSet":
		var o appsv1.StatefulSet
		err := yaml.UnmarshalStrict(doc, &o)
		return &o.Spec.Template.ObjectMeta, &o.Spec.Template.Spec, err
	case "DaemonSet":
		var o appsv1.DaemonSet
		err := yaml.UnmarshalStrict(doc, &o)
		return &o.Spec.Template.ObjectMeta, &o.Spec.Template.Spec, err
	case "Job":
		var o batchv1.Job
		err := yaml.UnmarshalStrict(doc, &o)
		return &o.Spec.Template.ObjectMeta, &o.Spec.Template.Spec, err
	}
	return nil, nil, nil
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "psa-check:", err)
	os.Exit(2)
}
