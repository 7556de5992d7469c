package webhook

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"
)

// templatePaths is where each workload kind keeps its pod template.
var templatePaths = map[string][]string{
	"Deployment": {"spec", "template"}, "StatefulSet": {"spec", "template"}, "DaemonSet": {"spec", "template"},
	"ReplicaSet": {"spec", "template"}, "Job": {"spec", "template"}, "CronJob": {"spec", "jobTemplate", "spec", "template"},
}

// InjectManifest is the dry run behind `meshletctl inject -f`: it injects
// every Pod and every pod template of Deployments, StatefulSets,
// DaemonSets, ReplicaSets, Jobs and CronJobs of a multi-document YAML
// manifest, as admission would (selection rules apply only to what the
// manifest says: a pod template opting out with meshlet.io/inject=false is
// left alone), and leaves other documents as they are.
func InjectManifest(data []byte, cfg Config) ([]byte, error) {
	var out []string
	for i, doc := range splitYAML(data) {
		js, err := yaml.YAMLToJSON([]byte(doc))
		if err != nil {
			return nil, fmt.Errorf("webhook: document %d: %v", i, err)
		}
		if string(js) == "null" {
			continue
		}
		var obj map[string]any
		if err := json.Unmarshal(js, &obj); err != nil {
			return nil, fmt.Errorf("webhook: document %d: not an object: %v", i, err)
		}
		kind, _ := obj["kind"].(string)
		if kind == "Pod" {
			var pod corev1.Pod
			if err := json.Unmarshal(js, &pod); err != nil {
				return nil, fmt.Errorf("webhook: document %d (Pod): %v", i, err)
			}
			if pod.Labels[PodLabel] != "false" && !pod.Spec.HostNetwork {
				injected, err := Inject(&pod, cfg)
				if err != nil {
					return nil, fmt.Errorf("webhook: document %d (Pod %s): %w", i, pod.Name, err)
				}
				pod = *injected
			}
			b, _ := json.Marshal(pod)
			obj = nil
			_ = json.Unmarshal(b, &obj)
		} else if path, ok := templatePaths[kind]; ok {
			if err := injectTemplate(obj, path, cfg); err != nil {
				return nil, fmt.Errorf("webhook: document %d (%s): %w", i, kind, err)
			}
		}
		b, err := yaml.Marshal(obj)
		if err != nil {
			return nil, err
		}
		out = append(out, string(b))
	}
	return []byte(strings.Join(out, "---\n")), nil
}

func injectTemplate(obj map[string]any, path []string, cfg Config) error {
	parent := obj
	for _, k := range path[:len(path)-1] {
		next, ok := parent[k].(map[string]any)
		if !ok {
			return fmt.Errorf("%s: missing", strings.Join(path, "."))
		}
		parent = next
	}
	last := path[len(path)-1]
	raw, _ := json.Marshal(parent[last])
	var tmpl corev1.PodTemplateSpec
	if err := json.Unmarshal(raw, &tmpl); err != nil {
		return fmt.Errorf("%s: %v", strings.Join(path, "."), err)
	}
	if tmpl.Labels[PodLabel] == "false" || tmpl.Spec.HostNetwork {
		return nil
	}
	pod := &corev1.Pod{ObjectMeta: tmpl.ObjectMeta, Spec: tmpl.Spec}
	injected, err := Inject(pod, cfg)
	if err != nil {
		return err
	}
	b, _ := json.Marshal(corev1.PodTemplateSpec{ObjectMeta: injected.ObjectMeta, Spec: injected.Spec})
	var m map[string]any
	_ = json.Unmarshal(b, &m)
	parent[last] = m
	return nil
}

// splitYAML splits a multi-document YAML stream on "---" lines.
func splitYAML(data []byte) []string {
	var docs []string
	var cur bytes.Buffer
	for _, line := range strings.SplitAfter(string(data), "\n") {
		if strings.TrimRight(line, " \r\n") == "---" {
			docs = append(docs, cur.String())
			cur.Reset()
			continue
		}
		cur.WriteString(line)
	}
	return append(docs, cur.String())
}
