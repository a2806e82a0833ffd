package experiments

// StorageFile is where the storage figures of the built-in configs are kept, relative to the
// repository's root: TestStorageFigures writes it (go test ./experiments -run
// TestStorageFigures -update-storage) and checks that it stays what the configs and the estimator
// give; `make docs` puts its table in docs/preprocessing.md.
const StorageFile = "docs/storage/storage.json"

// Storage is what the built-in configs write for their datasets, as `dcl reproduce --plan`
// estimates it, at the published size of each config's dataset.
type Storage struct {
	// Command is what wrote the file.
	Command string `json:"command"`
	// Method says how the figures were made: the fixtures planned and how they were scaled.
	Method  string          `json:"method"`
	Configs []StorageFigure `json:"configs"`
}

// StorageFigure is one config's datasets, with the pretraining views stored for every epoch
// (a pass per epoch, the cost of fresh stored views every epoch) and as the config makes
// them.
type StorageFigure struct {
	Config  string `json:"config"`
	Dataset string `json:"dataset"`
	// Split is the pretraining split and Records its images: the published count, or the
	// config's dataset.limit where that is smaller.
	Split   string `json:"split"`
	Records int64  `json:"records"`
	// Epochs is the most epochs any of the config's runs trains: the passes that give every
	// epoch fresh stored views.
	Epochs int `json:"epochs"`
	// Views is the config's preprocess.views: "online" (base shards, each image once) or
	// "offline" (Passes stored passes).
	Views  string `json:"views"`
	Passes int    `json:"passes,omitempty"`
	// StoredViews is the pretraining dataset with Epochs stored passes, Configured the same
	// dataset as the config makes it, and Evaluation the two evaluation
	// datasets, the same either way; bytes.
	StoredViews int64 `json:"stored_views_bytes"`
	Configured  int64 `json:"configured_bytes"`
	Evaluation  int64 `json:"evaluation_bytes"`
}
