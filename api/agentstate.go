package api

// AgentStateFile is the name of the agent's state file in its `state_dir`:
// written atomically and read by the agent alone, across its restarts and
// upgrades.
const AgentStateFile = "agent-state.json"

// APIServersFile is the name of the file, in the agent's `state_dir`, in
// which it keeps the apiservers it knows, the one that answered last
// first: written atomically and read by the agent alone, across its
// restarts (`{"servers": ["10.0.0.11:6443", ...]}`).
const APIServersFile = "api-servers.json"

// AgentState is what the agent keeps on disk across restarts and upgrades
// (AgentStateFile): the last request carried out, the swap whose finished
// demotion was last reported, the report not yet written on the Node, and
// the voters last seen. Written and read by the agent; a release reads the
// file the release before it wrote.
type AgentState struct {
	// V is the format's version (Version when written; 1 when missing).
	V        int      `json:"v"`
	Handled  *Request `json:"handled,omitempty"`
	Finished string   `json:"finished,omitempty"`
	Pending  *Report  `json:"pending,omitempty"`
	// Voters are the nodes whose members voted when last seen.
	Voters []string `json:"voters,omitempty"`
	// Listed is this host's etcd member, by name, as the cluster last
	// listed it (its own etcd, or its voters' while its own did not
	// answer): a later list of the voters without it says it was removed.
	Listed string `json:"listed,omitempty"`
}
