package lb

// Well-known topology labels, as Kubernetes and Istio name them.
const (
	LabelRegion  = "topology.kubernetes.io/region"
	LabelZone    = "topology.kubernetes.io/zone"
	LabelSubZone = "topology.istio.io/subzone"
)

// DefaultFailoverLabels orders failover by region, then zone: endpoints in
// the client's zone are P0, the rest of its region P1, everything else P2.
var DefaultFailoverLabels = []string{LabelRegion, LabelZone}

// LocalityLabels returns the topology labels of a locality (empty parts left
// out), to combine with other endpoint labels for FailoverPriorities.
func LocalityLabels(l Locality) map[string]string {
	m := make(map[string]string, 3)
	for k, v := range map[string]string{LabelRegion: l.Region, LabelZone: l.Zone, LabelSubZone: l.SubZone} {
		if v != "" {
			m[k] = v
		}
	}
	return m
}

// FailoverPriorities assigns each endpoint a priority relative to the
// client, as Istio's failoverPriority does: with N labels in order, an
// endpoint matching the client on the first k labels (and not the k+1th)
// gets priority N-k, so a full match is P0 and no match is PN. A label the
// client lacks matches nothing. Levels with no endpoint are then closed up,
// so priorities stay contiguous. It is explicit: nothing else in lb assigns
// priorities by locality.
func FailoverPriorities(client map[string]string, endpoints []map[string]string, labels []string) []uint32 {
	raw := make([]uint32, len(endpoints))
	used := make([]bool, len(labels)+1)
	for i, ep := range endpoints {
		k := 0
		for _, l := range labels {
			cv, ok := client[l]
			if !ok || ep[l] != cv {
				break
			}
			k++
		}
		raw[i] = uint32(len(labels) - k)
		used[raw[i]] = true
	}
	// Close up levels nobody landed on.
	remap := make([]uint32, len(used))
	next := uint32(0)
	for lvl, u := range used {
		remap[lvl] = next
		if u {
			next++
		}
	}
	for i := range raw {
		raw[i] = remap[raw[i]]
	}
	return raw
}
