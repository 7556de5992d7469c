package webhook

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"sync/atomic"

	"gomodules.xyz/jsonpatch/v2"
	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// NamespaceLabels returns a namespace's labels (a client-go lister in the
// injector; a map in tests). ok is false when the namespace is unknown.
type NamespaceLabels func(namespace string) (labels map[string]string, ok bool)

// Injector answers admission reviews.
type Injector struct {
	Config     Config
	Namespaces NamespaceLabels
	Log        *slog.Logger
	// Counters: injected, skipped, errored (admission results).
	Injected, Skipped, Errored atomic.Uint64
}

// Review answers one AdmissionReview: for an injected pod, an allowed
// response carrying a JSONPatch computed from the original and the mutated
// pod; otherwise allowed without a patch. Malformed requests are refused
// with the reason (the API server shows it to the user).
func (in *Injector) Review(req *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
	resp := &admissionv1.AdmissionResponse{UID: req.UID, Allowed: true}
	if req.Kind.Kind != "Pod" || req.Operation != admissionv1.Create {
		in.Skipped.Add(1)
		return resp
	}
	var pod corev1.Pod
	if err := json.Unmarshal(req.Object.Raw, &pod); err != nil {
		in.Errored.Add(1)
		return deny(resp, fmt.Sprintf("meshlet injector: decode pod: %v", err))
	}
	ns := req.Namespace
	if ns == "" {
		ns = pod.Namespace
	}
	var labels map[string]string
	if in.Namespaces != nil {
		labels, _ = in.Namespaces(ns)
	}
	d := Decide(&pod, ns, labels)
	if _, done := pod.Annotations[StatusAnnotation]; done && d.Inject {
		d = Decision{false, "already injected"}
	}
	if !d.Inject {
		in.Skipped.Add(1)
		in.log().Debug("not injecting", "namespace", ns, "pod", podName(&pod), "reason", d.Reason)
		return resp
	}
	mutated, err := Inject(&pod, in.Config)
	if err != nil {
		in.Errored.Add(1)
		return deny(resp, "meshlet injector: "+err.Error())
	}
	patch, err := createPatch(req.Object.Raw, mutated)
	if err != nil {
		in.Errored.Add(1)
		return deny(resp, "meshlet injector: "+err.Error())
	}
	pt := admissionv1.PatchTypeJSONPatch
	resp.Patch, resp.PatchType = patch, &pt
	in.Injected.Add(1)
	in.log().Info("injected", "namespace", ns, "pod", podName(&pod), "reason", d.Reason)
	return resp
}

func (in *Injector) log() *slog.Logger {
	if in.Log != nil {
		return in.Log
	}
	return slog.Default()
}

func podName(p *corev1.Pod) string {
	if p.Name != "" {
		return p.Name
	}
	return p.GenerateName + "*"
}

func deny(resp *admissionv1.AdmissionResponse, msg string) *admissionv1.AdmissionResponse {
	resp.Allowed = false
	resp.Result = &metav1.Status{Status: metav1.StatusFailure, Message: msg, Code: http.StatusBadRequest}
	return resp
}

// createPatch diffs the original JSON against the mutated pod with a
// JSONPatch library (never hand-assembled operations).
func createPatch(original []byte, mutated *corev1.Pod) ([]byte, error) {
	after, err := json.Marshal(mutated)
	if err != nil {
		return nil, fmt.Errorf("encode mutated pod: %w", err)
	}
	ops, err := jsonpatch.CreatePatch(original, after)
	if err != nil {
		return nil, fmt.Errorf("compute patch: %w", err)
	}
	return json.Marshal(ops)
}

// maxReview bounds an AdmissionReview body.
const maxReview = 8 << 20

// ServeHTTP is the webhook endpoint: AdmissionReview v1 in and out.
func (in *Injector) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		http.Error(w, "POST an AdmissionReview", http.StatusMethodNotAllowed)
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, maxReview+1))
	if err != nil || len(body) > maxReview {
		http.Error(w, "admission review too large or unreadable", http.StatusRequestEntityTooLarge)
		return
	}
	var review admissionv1.AdmissionReview
	if err := json.Unmarshal(body, &review); err != nil || review.Request == nil {
		http.Error(w, fmt.Sprintf("want an admission.k8s.io/v1 AdmissionReview with a request: %v", err), http.StatusBadRequest)
		return
	}
	review.Response = in.Review(review.Request)
	review.Request = nil
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(&review)
}
