package contract

// PluginType is the plugin's CNI type: the "type" of the ipam block that
// selects stickyip, and so the name of its binary in the CNI bin directory
// (a runtime executes <binDir>/<type>).
const PluginType = "stickyip"
