package manifests

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"

	"gpucloud/internal/flagdoc"
)

// Just the fields the checks read.
type object struct {
	Kind     string `yaml:"kind"`
	Metadata struct {
		Name      string            `yaml:"name"`
		Namespace string            `yaml:"namespace"`
		Labels    map[string]string `yaml:"labels"`
	} `yaml:"metadata"`
	Data       map[string]string `yaml:"data"`
	StringData map[string]string `yaml:"stringData"`
	Spec       yaml.Node         `yaml:"spec"`
	file       string
}

type workloadSpec struct {
	Replicas *int `yaml:"replicas"`
	Selector struct {
		MatchLabels map[string]string `yaml:"matchLabels"`
	} `yaml:"selector"`
	Template struct {
		Metadata struct {
			Labels map[string]string `yaml:"labels"`
		} `yaml:"metadata"`
		Spec podSpec `yaml:"spec"`
	} `yaml:"template"`
}

type podSpec struct {
	Containers []container `yaml:"containers"`
	Volumes    []struct {
		Name   string `yaml:"name"`
		Secret *struct {
			SecretName string `yaml:"secretName"`
		} `yaml:"secret"`
		ConfigMap *struct {
			Name string `yaml:"name"`
		} `yaml:"configMap"`
	} `yaml:"volumes"`
}

type container struct {
	Name    string   `yaml:"name"`
	Image   string   `yaml:"image"`
	Command []string `yaml:"command"`
	EnvFrom []struct {
		ConfigMapRef *struct{ Name string } `yaml:"configMapRef"`
		SecretRef    *struct{ Name string } `yaml:"secretRef"`
	} `yaml:"envFrom"`
	Env []struct {
		Name      string `yaml:"name"`
		Value     string `yaml:"value"`
		ValueFrom *struct {
			SecretKeyRef *struct{ Name, Key string } `yaml:"secretKeyRef"`
		} `yaml:"valueFrom"`
	} `yaml:"env"`
	Ports []struct {
		Name          string `yaml:"name"`
		ContainerPort int    `yaml:"containerPort"`
	} `yaml:"ports"`
	VolumeMounts []struct {
		Name      string `yaml:"name"`
		MountPath string `yaml:"mountPath"`
	} `yaml:"volumeMounts"`
	ReadinessProbe *probe `yaml:"readinessProbe"`
	LivenessProbe  *probe `yaml:"livenessProbe"`
}

type probe struct {
	HTTPGet *struct {
		Port yaml.Node `yaml:"port"`
	} `yaml:"httpGet"`
}

type serviceSpec struct {
	Selector map[string]string `yaml:"selector"`
	Ports    []struct {
		Port       int       `yaml:"port"`
		TargetPort yaml.Node `yaml:"targetPort"`
	} `yaml:"ports"`
}

type pdbSpec struct {
	MinAvailable int `yaml:"minAvailable"`
	Selector     struct {
		MatchLabels map[string]string `yaml:"matchLabels"`
	} `yaml:"selector"`
}

func loadAll(t *testing.T) []*object {
	t.Helper()
	files, _ := filepath.Glob("*.yaml")
	if len(files) < 4 {
		t.Fatalf("manifests %v", files)
	}
	var out []*object
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		dec := yaml.NewDecoder(bytes.NewReader(raw))
		dec.KnownFields(false)
		for {
			o := &object{file: f}
			if err := dec.Decode(o); errors.Is(err, io.EOF) {
				break
			} else if err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			if o.Kind == "" || o.Metadata.Name == "" || o.Metadata.Namespace != "gpucloud" {
				t.Fatalf("%s: object without kind, name or the gpucloud namespace: %+v", f, o.Metadata)
			}
			out = append(out, o)
		}
	}
	return out
}

func decodeSpec[T any](t *testing.T, o *object) T {
	t.Helper()
	var s T
	if err := o.Spec.Decode(&s); err != nil {
		t.Fatalf("%s %s/%s: spec: %v", o.file, o.Kind, o.Metadata.Name, err)
	}
	return s
}

// imageBinaries are the binaries the Dockerfile puts in the image.
func imageBinaries(t *testing.T) map[string]bool {
	raw, err := os.ReadFile("Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^COPY --from=build \S+ (\S+)$`).FindAllStringSubmatch(string(raw), -1) {
		out[m[1]] = true
	}
	return out
}

// ours reports whether a variable is one of gpucloud's settings (others, like NODE_NAME or
// NVIDIA_VISIBLE_DEVICES, belong to Kubernetes or the NVIDIA runtime).
func ours(name string) bool {
	for _, p := range []string{"GPUCLOUD_", "HOSTD_", "GPUSERVERD_"} {
		if strings.HasPrefix(name, p) {
			return true
		}
	}
	return false
}

func subset(sel, labels map[string]string) bool {
	if len(sel) == 0 {
		return false
	}
	for k, v := range sel {
		if labels[k] != v {
			return false
		}
	}
	return true
}

var pathSetting = regexp.MustCompile(`_(FILE|CONFIG|DIR|ROOT)$`)

func TestManifestsAreConsistent(t *testing.T) {
	objs := loadAll(t)
	byKind := map[string]map[string]*object{}
	for _, o := range objs {
		if byKind[o.Kind] == nil {
			byKind[o.Kind] = map[string]*object{}
		}
		if byKind[o.Kind][o.Metadata.Name] != nil {
			t.Errorf("%s %s defined twice", o.Kind, o.Metadata.Name)
		}
		byKind[o.Kind][o.Metadata.Name] = o
	}
	bins, documented := imageBinaries(t), flagdoc.Documented(t)
	image := ""
	workloads := map[string]workloadSpec{}
	for _, kind := range []string{"Deployment", "DaemonSet", "Job"} {
		for name, o := range byKind[kind] {
			w := decodeSpec[workloadSpec](t, o)
			if kind != "Job" && !subset(w.Selector.MatchLabels, w.Template.Metadata.Labels) {
				t.Errorf("%s %s: selector %v does not select its pods %v", kind, name, w.Selector.MatchLabels, w.Template.Metadata.Labels)
			}
			workloads[kind+"/"+name] = w
			checkPod(t, kind+"/"+name, w.Template.Spec, byKind, bins, documented, &image)
		}
	}
	if len(workloads) != 4 {
		t.Errorf("workloads %d, want the apiserver Deployment, the migrate Job and two DaemonSets", len(workloads))
	}
	dep, ok := workloads["Deployment/gpucloud-apiserver"]
	if !ok || dep.Replicas == nil || *dep.Replicas < 2 {
		t.Fatalf("the apiserver Deployment must run several replicas")
	}
	apiPorts := map[string]int{}
	for _, p := range dep.Template.Spec.Containers[0].Ports {
		apiPorts[p.Name] = p.ContainerPort
	}
	// GPUCLOUD_LISTEN must be the port the Service, probes and load balancer use.
	listen := byKind["ConfigMap"]["gpucloud-apiserver"].Data["GPUCLOUD_LISTEN"]
	if _, port, _ := strings.Cut(listen, ":"); port != strconv.Itoa(apiPorts["https"]) {
		t.Errorf("GPUCLOUD_LISTEN %q, container port https %d", listen, apiPorts["https"])
	}
	svc := decodeSpec[serviceSpec](t, byKind["Service"]["gpucloud-apiserver"])
	if !subset(svc.Selector, dep.Template.Metadata.Labels) {
		t.Errorf("Service selector %v misses the apiserver pods", svc.Selector)
	}
	for _, p := range svc.Ports {
		if _, ok := apiPorts[p.TargetPort.Value]; !ok {
			t.Errorf("Service targetPort %q is no port of the apiserver container (%v)", p.TargetPort.Value, apiPorts)
		}
	}
	pdb := decodeSpec[pdbSpec](t, byKind["PodDisruptionBudget"]["gpucloud-apiserver"])
	if !subset(pdb.Selector.MatchLabels, dep.Template.Metadata.Labels) || pdb.MinAvailable < 1 || pdb.MinAvailable >= *dep.Replicas {
		t.Errorf("PodDisruptionBudget %+v vs %d replicas: must select the apiserver and allow one eviction", pdb, *dep.Replicas)
	}
	// The migrate Job reaches the same database as the replicas.
	if a, b := secretRefs(workloads["Job/gpucloud-migrate"]), secretRefs(dep); !strings.Contains(b, "gpucloud-database") || !strings.Contains(a, "gpucloud-database") {
		t.Errorf("migrate Job secrets %q, apiserver %q: both need gpucloud-database", a, b)
	}
}

func secretRefs(w workloadSpec) string {
	var out []string
	for _, c := range w.Template.Spec.Containers {
		for _, e := range c.EnvFrom {
			if e.SecretRef != nil {
				out = append(out, e.SecretRef.Name)
			}
		}
	}
	return strings.Join(out, ",")
}

// checkPod checks one pod template's references: image and binary, ConfigMaps, Secrets and
// their keys, volumes, ports of probes, and that every gpucloud variable is documented and every
// file a setting names lies under a mounted volume.
func checkPod(t *testing.T, what string, pod podSpec, byKind map[string]map[string]*object, bins, documented map[string]bool, image *string) {
	t.Helper()
	volumes := map[string]bool{}
	for _, v := range pod.Volumes {
		volumes[v.Name] = true
		if v.Secret != nil && byKind["Secret"][v.Secret.SecretName] == nil {
			t.Errorf("%s: volume %s names Secret %s, which no manifest defines", what, v.Name, v.Secret.SecretName)
		}
		if v.ConfigMap != nil && byKind["ConfigMap"][v.ConfigMap.Name] == nil {
			t.Errorf("%s: volume %s names ConfigMap %s, which no manifest defines", what, v.Name, v.ConfigMap.Name)
		}
	}
	for _, c := range pod.Containers {
		if *image == "" {
			*image = c.Image
		}
		if c.Image != *image || !strings.Contains(c.Image, ":") || strings.HasSuffix(c.Image, ":latest") {
			t.Errorf("%s: image %q; every workload runs the one pinned image %q", what, c.Image, *image)
		}
		if len(c.Command) == 0 || !bins[c.Command[0]] {
			t.Errorf("%s: command %v is not a binary the Dockerfile installs (%v)", what, c.Command, bins)
		}
		env := map[string]string{}
		for _, e := range c.EnvFrom {
			var src map[string]string
			switch {
			case e.ConfigMapRef != nil:
				o := byKind["ConfigMap"][e.ConfigMapRef.Name]
				if o == nil {
					t.Errorf("%s: envFrom ConfigMap %s is not defined", what, e.ConfigMapRef.Name)
					continue
				}
				src = o.Data
			case e.SecretRef != nil:
				o := byKind["Secret"][e.SecretRef.Name]
				if o == nil {
					t.Errorf("%s: envFrom Secret %s is not defined", what, e.SecretRef.Name)
					continue
				}
				src = o.StringData
			}
			for k, v := range src {
				env[k] = v
			}
		}
		for _, e := range c.Env {
			env[e.Name] = e.Value
			if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil {
				ref := e.ValueFrom.SecretKeyRef
				if s := byKind["Secret"][ref.Name]; s == nil || s.StringData[ref.Key] == "" {
					t.Errorf("%s: %s from Secret %s key %s, which is not defined", what, e.Name, ref.Name, ref.Key)
				}
			}
		}
		mounts := map[string]bool{}
		for _, m := range c.VolumeMounts {
			if !volumes[m.Name] {
				t.Errorf("%s: mount of undefined volume %s", what, m.Name)
			}
			mounts[m.MountPath] = true
		}
		binary := filepath.Base(c.Command[0])
		for k, v := range env {
			if !ours(k) {
				continue
			}
			if !documented[k] {
				t.Errorf("%s: %s is not a setting docs/configuration.md documents", what, k)
			}
			// Only the settings of this container's daemon matter to it (the agents share a ConfigMap).
			if !strings.HasPrefix(strings.ToLower(k), strings.TrimPrefix(binary, "gpucloud-")) && !strings.HasPrefix(k, "GPUCLOUD_") {
				continue
			}
			if pathSetting.MatchString(k) && strings.HasPrefix(v, "/") && !under(v, mounts) {
				t.Errorf("%s: %s=%s lies under no volume mount of the container", what, k, v)
			}
		}
		ports := map[string]bool{}
		for _, p := range c.Ports {
			ports[p.Name] = true
		}
		probes := 0
		for _, pr := range []*probe{c.ReadinessProbe, c.LivenessProbe} {
			if pr != nil {
				probes++
			}
			if pr != nil && pr.HTTPGet != nil && !ports[pr.HTTPGet.Port.Value] {
				t.Errorf("%s: probe port %q is no named port of the container", what, pr.HTTPGet.Port.Value)
			}
		}
		if len(c.Ports) > 0 && probes == 0 {
			t.Errorf("%s: a serving container without a health probe", what)
		}
	}
}

func under(path string, mounts map[string]bool) bool {
	for m := range mounts {
		if path == m || strings.HasPrefix(path, strings.TrimSuffix(m, "/")+"/") {
			return true
		}
	}
	return false
}
