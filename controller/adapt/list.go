package adapt

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/fleet-role/fleet-role/api"
)

// ErrInput marks input that cannot be read: bad JSON, a missing field, a
// malformed annotation.
var ErrInput = errors.New("bad input")

// ReadList reads a Kubernetes List, as `kubectl get
// nodes,leases,configmaps,pods -A -o json` prints it, keeping the objects
// the planner reads: every Node, the Leases in kube-node-lease, the regrade
// Lease and the status ConfigMap in namespace, and the Pods. Other objects
// are ignored. Errors wrap ErrInput and name the item and the field.
func ReadList(r io.Reader, namespace string) (Input, error) {
	data, err := io.ReadAll(r)
	if err != nil {
		return Input{}, fmt.Errorf("%w: read: %v", ErrInput, err)
	}
	var list struct {
		Kind  string            `json:"kind"`
		Items []json.RawMessage `json:"items"`
	}
	if err := json.Unmarshal(data, &list); err != nil {
		return Input{}, fmt.Errorf("%w: %s", ErrInput, jsonError(data, err))
	}
	if list.Items == nil {
		return Input{}, fmt.Errorf("%w: missing field %q: want a List, as `kubectl get nodes,leases,configmaps,pods -A -o json` prints", ErrInput, "items")
	}
	var in Input
	var errs []error
	for i, raw := range list.Items {
		if err := in.add(i, raw, namespace); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		return Input{}, fmt.Errorf("%w: %w", ErrInput, errors.Join(errs...))
	}
	return in, nil
}

func (in *Input) add(i int, raw json.RawMessage, namespace string) error {
	var head struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
		Metadata   struct {
			Name      string `json:"name"`
			Namespace string `json:"namespace"`
		} `json:"metadata"`
	}
	if err := json.Unmarshal(raw, &head); err != nil {
		return fmt.Errorf("items[%d]: %s", i, jsonError(raw, err))
	}
	where := fmt.Sprintf("items[%d]", i)
	switch {
	case head.Kind == "":
		return fmt.Errorf("%s: missing field %q", where, "kind")
	case head.APIVersion == "":
		return fmt.Errorf("%s (%s): missing field %q", where, head.Kind, "apiVersion")
	case head.Metadata.Name == "":
		return fmt.Errorf("%s (%s): missing field %q", where, head.Kind, "metadata.name")
	}
	what := strings.ToLower(head.Kind) + "/" + head.Metadata.Name
	if head.Metadata.Namespace != "" {
		what = strings.ToLower(head.Kind) + "/" + head.Metadata.Namespace + "/" + head.Metadata.Name
	}
	needNamespace := func() error {
		if head.Metadata.Namespace == "" {
			return fmt.Errorf("%s (%s): missing field %q", where, what, "metadata.namespace")
		}
		return nil
	}
	switch {
	case head.Kind == "Node" && head.APIVersion == "v1":
		var n corev1.Node
		if err := decodeObject(raw, &n, what); err != nil {
			return err
		}
		in.Nodes = append(in.Nodes, &n)
	case head.Kind == "Pod" && head.APIVersion == "v1":
		if err := needNamespace(); err != nil {
			return err
		}
		var p corev1.Pod
		if err := decodeObject(raw, &p, what); err != nil {
			return err
		}
		in.Pods = append(in.Pods, &p)
	case head.Kind == "Lease" && head.APIVersion == "coordination.k8s.io/v1":
		if err := needNamespace(); err != nil {
			return err
		}
		var l coordinationv1.Lease
		if err := decodeObject(raw, &l, what); err != nil {
			return err
		}
		switch {
		case l.Namespace == api.NodeLeaseNamespace:
			in.NodeLeases = append(in.NodeLeases, &l)
		case l.Namespace == namespace && l.Name == api.LeaseName:
			in.Lease = &l
		}
	case head.Kind == "ConfigMap" && head.APIVersion == "v1":
		if err := needNamespace(); err != nil {
			return err
		}
		if head.Metadata.Namespace != namespace || head.Metadata.Name != api.StatusConfigMap {
			return nil
		}
		var cm corev1.ConfigMap
		if err := decodeObject(raw, &cm, what); err != nil {
			return err
		}
		in.Status = &cm
	}
	return nil
}

func decodeObject(raw json.RawMessage, v any, what string) error {
	if err := json.Unmarshal(raw, v); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) && te.Field != "" {
			return fmt.Errorf("%s: field %q: want %s, got a JSON %s", what, te.Field, te.Type, te.Value)
		}
		return fmt.Errorf("%s: %s", what, jsonError(raw, err))
	}
	return nil
}

// jsonError says where in the data a JSON error is, by line and column.
func jsonError(data []byte, err error) string {
	var se *json.SyntaxError
	if errors.As(err, &se) {
		line, col := position(data, se.Offset)
		return fmt.Sprintf("invalid JSON at line %d, column %d: %v", line, col, se)
	}
	if errors.Is(err, io.ErrUnexpectedEOF) {
		return "invalid JSON: unexpected end of input"
	}
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		if te.Field == "" {
			return fmt.Sprintf("want a JSON object, got a JSON %s", te.Value)
		}
		return fmt.Sprintf("field %q: want %s, got a JSON %s", te.Field, te.Type, te.Value)
	}
	return "invalid JSON: " + err.Error()
}

// position is the line and column of the byte a JSON syntax error's
// offset (the count of bytes read, the bad one included) points at.
func position(data []byte, offset int64) (line, col int) {
	at := min(max(int(offset)-1, 0), len(data))
	before := data[:at]
	line = bytes.Count(before, []byte("\n")) + 1
	col = at - bytes.LastIndexByte(before, '\n')
	return line, col
}
