package cuda

// tf32Option is the go-xla plugin option that decides whether float32 convolutions and
// matrix products may run on TF32 tensor cores. It is always spelled out: left out, go-xla
// turns TF32 on for every CUDA plugin.
func tf32Option(allow bool) string {
	if allow {
		return ",tf32=true"
	}
	return ",tf32=false"
}

// MemoryStats are a GPU allocator's figures (PJRT's PJRT_Device_MemoryStats), in MiB; 0 where
// the plugin does not report one.
type MemoryStats struct {
	// InUseMiB is the memory the allocator has handed out now.
	InUseMiB float64 `json:"in_use_mib"`
	// PeakInUseMiB is the most it ever had handed out at once: what torch.cuda's
	// max_memory_allocated measures for PyTorch.
	PeakInUseMiB float64 `json:"peak_in_use_mib,omitempty"`
	// PeakPoolMiB is the most memory the allocator ever held from the driver (its pool), as
	// torch.cuda's max_memory_reserved.
	PeakPoolMiB float64 `json:"peak_pool_mib,omitempty"`
}
