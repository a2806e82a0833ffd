package reliability

// Claims are the promises of docs/reliability.md, in the document's order. A claim says only
// what its tests check; `make docs` writes the list, and Check (run by docsgen and its test)
// refuses a claim whose tests do not exist.
var Claims = []Claim{
	{
		Title: "Storage fails fast.",
		Text: "Every operation on `gs://` waits at most 30 s without progress (`--storage-timeout` on every " +
			"subcommand, or `DCL_STORAGE_TIMEOUT=2m` in the environment, for slow links). Each retry is one " +
			"warning line on stderr (`msg=\"storage: retrying\" op=… path=… endpoint=… attempt=… after=…`); giving " +
			"up is one line naming the path, the endpoint and the cause. Uploads, reads and listings are " +
			"retried through 5xx answers, dropped and refused connections, and an upload that fails leaves " +
			"nothing visible.",
		Tests: []Tests{
			{"./internal/storage", []string{"TestGCSUnreachableFailsFastInOneLine", "TestGCSRetriesUntilTheServerAnswers",
				"TestGCSOperationsSurviveTransientFaults", "TestGCSFailedUploadLeavesNothing", "TestWaitFromEnv"}},
			{"./cmd/dcl", []string{"TestShardsVerifyFailsFastWhenStorageIsUnreachable"}},
		},
	},
	{
		Title: "Every split reads its own images.",
		Text: "ImageNet and image folders are dataset roots resolved per split (`train/`, `val/`, `test/`, or " +
			"explicit per-split inputs); a split that would read another split's files is refused in one line " +
			"naming both; the manifest names each split's sources, and `reproduce` refuses an evaluation whose " +
			"test split shares sources with pretraining or eval-train.",
		Tests: []Tests{
			{"./transforms/datasets", []string{"TestSplitReadingAnotherSplitIsRefused", "TestFolderSplits"}},
			{"./reproduce", []string{"TestEachSplitReadsItsOwnImages", "TestEvaluationRefusesATestSetSharingImages"}},
		},
	},
	{
		Title: "One writer per output.",
		Text: "Every command that writes an output or run folder claims it with a lock that lives with the " +
			"data: a hidden `.NAME.dcl-lock` beside the output (locally a flock on a plain file opened without " +
			"following links, writable only by those who may write the output's folder; on `gs://` an object " +
			"created only if none exists, taken over once its holder stops refreshing it). Every writer of one " +
			"output, whatever its `TMPDIR`, meets the same lock; a second writer is refused naming the first, " +
			"and readers refuse embeddings whose metadata and data disagree.",
		Tests: []Tests{
			{"./internal/guard", []string{"TestLocksLiveWithTheData", "TestLockFilesCannotBeTurnedAgainstOtherFiles",
				"TestLockFilesAreTheFolderWritersOnly", "TestLocksOnGCS"}},
			{"./cmd/dcl", []string{"TestEveryWriterTakesTheLock", "TestTwoWritersAtOnce", "TestLocksNeedNoTempDir"}},
			{"./shards/embeddings", []string{"TestEmbeddingsWrittenByTwoWritersAreRefused"}},
		},
	},
	{
		Title: "Nothing is removed or overwritten that the command did not write.",
		Text: "An output that is, holds or lies inside an input is a usage error naming both; " +
			"`--keep-checkpoints` prunes only the run's own checkpoints, not files named like them; " +
			"`preprocess --overwrite` refuses a folder that holds embeddings or other Parquet files.",
		Tests: []Tests{
			{"./cmd/dcl", []string{"TestOutputsThatWouldDestroyInputsAreRefused"}},
			{"./trainstep", []string{"TestKeepCheckpointsRemovesOnlyTheRunsOwn"}},
			{"./shards", []string{"TestOverwriteRemovesOnlyDatasets"}},
		},
	},
	{
		Title: "Files as a plain create makes them.",
		Text: "Atomically written files and folders get the permissions the umask gives (0666 and 0777 less " +
			"it), and an output name of up to 255 bytes can be written and locked (temporary and lock names " +
			"are shortened to fit, stay hidden beside the file and differ for two names).",
		Tests: []Tests{
			{"./internal/storage", []string{"TestWritesKeepTheUmask", "TestLongNamesAreWritten", "TestMutatedNamesDeriveSafeNames"}},
		},
	},
	{
		Title: "File and folder names are bytes.",
		Text: "A path given on the command line, and a file or class folder's name, is used byte for byte " +
			"whether or not it is UTF-8: an output lands at exactly the path given, and `preprocess`, `train`, " +
			"`embed` and `knn` read and write such names. Where a name must be text (keys and class names in " +
			"Parquet, JSON files and output), each byte that is not UTF-8 is written `\\xHH` and a backslash " +
			"that would read as such an escape `\\x5c` (a Latin-1 `caf\\xe9` folder is the class `caf\\xe9`, a " +
			"folder named with the characters `caf\\xe9` the class `caf\\x5cxe9`), so two names never share a text " +
			"and each text reads back as its name.",
		Tests: []Tests{
			{"./cmd/dcl", []string{"TestNamesThatAreNotUTF8EndToEnd"}},
			{"./transforms/datasets", []string{"TestFolderNamesThatAreNotUTF8"}},
			{"./internal/rawname", []string{"TestTextIsUTF8AndReadsBackExactly", "TestMarshalKeepsEveryByte", "TestValidEscapesOnlyWhatIsNotUTF8"}},
			{"./pipelines", []string{"TestDoFnsCarryNamesByteForByte"}},
		},
	},
	{
		Title: "Resume is the same run.",
		Text: "`train --resume` refuses every changed setting that alters the run, naming each; more " +
			"`--epochs` extends it, logged and recorded in the checkpoint.",
		Tests: []Tests{
			{"./trainstep", []string{"TestResumeRefusesChangedSettings", "TestResumeExtendsWithMoreEpochs"}},
		},
	},
	{
		Title: "Labels cannot drift.",
		Text: "An image folder's class folder without images keeps its label, hidden folders are not classes, " +
			"and `dcl knn` and `dcl linear` refuse train and test embeddings whose class lists differ, naming " +
			"the first label that differs.",
		Tests: []Tests{
			{"./transforms/datasets", []string{"TestFolderEmptyClassKeepsItsLabel", "TestHiddenFoldersAreNotClasses"}},
			{"./pipelines", []string{"TestEvaluationsRefuseDifferentClassLists"}},
		},
	},
	{
		Title: "Short files are refused.",
		Text: "A CIFAR-10, Fashion-MNIST or MNIST file one record (up to 1%) short of the published file's " +
			"records, a cut copy that only its count gives away, is refused naming the file and both counts; " +
			"a smaller file is a sample, read with a warning naming both counts.",
		Tests: []Tests{
			{"./transforms/datasets", []string{"TestFixedSizeBadInput", "TestIDXCutCopiesAreRefused", "TestSampleOfAPublishedFileIsReadWithAWarning"}},
		},
	},
	{
		Title: "Compressed sources are checked whole.",
		Text: "A gzipped IDX file is decompressed to its end while the split is planned, so its CRC-32 " +
			"vouches for every record before any is used, `--limit` or not.",
		Tests: []Tests{
			{"./transforms/datasets", []string{"TestIDXCorruptGzipIsRefusedBeforeAnyRecord"}},
			{"./cmd/dcl", []string{"TestPreprocessRefusesACorruptGzipUnderLimit"}},
		},
	},
	{
		Title: "Memory is bounded before it is spent.",
		Text: "An image's decoded size is counted from its header (bytes per pixel, and an interlaced PNG's " +
			"passes, included) against 256 MiB " +
			"an image and 768 MiB for the decodings a process has in flight; `--width`, `--projection-dim`, " +
			"NNCLR's `--predictor-hidden` and `--queue-size` that cannot fit in the machine's memory are " +
			"refused, naming the largest value that fits. Decoding work is bounded too: a JPEG with more than " +
			"64 scans of one component is refused, and a base image whose header disagrees with its row's " +
			"size is refused before its pixels are allocated. Decoding allocates no more than is counted: a " +
			"16-bit PNG's conversion to 8 bits allocates nothing a pixel.",
		Tests: []Tests{
			{"./transforms/datasets", []string{"TestDecodeRefusesHugeHeaders", "TestDecodeBytesCountBytesPerPixel",
				"TestDecodeBudgetHoldsForTheProcess", "TestDecodeMemoryIsBounded", "TestDecodeAllocatesWhatTheBudgetCounts", "TestFolderBadInput"}},
			{"./transforms", []string{"TestFromStdMatchesNRGBAModelWithoutGarbage"}},
			{"./trainstep", []string{"TestAbsurdSettingsAreRefusedByMemory"}},
			{"./cmd/dcl", []string{"TestAbsurdWidthAndQueueAreUsageErrors"}},
			{"./internal/jpeg", []string{"TestScansPerComponentAreBounded"}},
			{"./shards", []string{"TestBaseImageHeaderIsCheckedFirst"}},
		},
	},
	{
		Title: "Wrong values are usage errors.",
		Text: "Unknown runners, impossible runner set-ups, splits a dataset lacks, out-of-range flag values and " +
			"config values that would be changed to fit (`passes: 2.5`, a negative learning rate, `.inf`, a " +
			"second YAML document) exit 2 with one line, before any input is read; so do values no run can " +
			"compute (a temperature outside float32's normal range, a peak learning rate `lr·batch/256` past " +
			"float32's largest number, more than 2³¹−1 epochs), a `--config` that is a FIFO, and `--plan` with " +
			"`--restore-state`. An input that does not exist, or is a FIFO, is reported as such.",
		Tests: []Tests{
			{"./cmd/dcl", []string{"TestCommandLineErrorsExit2WithOneLine", "TestRunnerErrorsExit2", "TestReproduceCommandLineErrors"}},
			{"./reproduce", []string{"TestParseRejectsBadConfigs"}},
			{"./transforms/datasets", []string{"TestPlanMissingInputAndUnknownSplit", "TestFIFOInputsDoNotHang"}},
		},
	},
	{
		Title: "Killed runs leave nothing that passes for data,",
		Text: "and the same command run again (train: with `--resume`) gives the same output. A complete write " +
			"also removes the temporaries of the same file that killed processes left, and temporaries are " +
			"hidden names no glob for the data's extension takes; shards and the parts of " +
			"`embed --output=X.parquet` are not seen by a `**/*.parquet` glob until committed. A reproduction " +
			"killed after its history entry is complete, and the next one removes the temporary a killed " +
			"history write left. `--restore-state` unpacks all or nothing. A dataset's or embeddings " +
			"directory's manifest is written last, once every file it lists is in place (an earlier manifest " +
			"is removed first), so no manifest names a missing file; a kill among the commit's moves leaves " +
			"whole files and no manifest, and the same command, run again, finishes the commit.",
		Tests: []Tests{
			{"./cmd/dcl", []string{"TestKilledRunsRerunToTheSameOutput"}},
			{"./internal/storage", []string{"TestWriteRemovesWhatKilledWritesOfTheFileLeft", "TestLeftoverTemporariesAreNotData",
				"TestTemporaryNamesMatchNoGlobOfData"}},
			{"./shards", []string{"TestUncommittedShardsAreNoData"}},
			{"./shards/embeddings", []string{"TestCommitWritesTheManifestLast"}},
			{"./pipelines", []string{"TestSingleFileEmbeddingsStageNoParquet"}},
			{"./reproduce", []string{"TestKilledAfterItsHistoryEntry", "TestHistoryThatWouldLie", "TestRestoreStateRefusesBadArchives",
				"TestMutatedStatesUnpackAllOrNothing"}},
		},
	},
	{
		Title: "Loaded state is checked.",
		Text: "A checkpoint's header (a key given twice is refused) must describe a position the run can reach, " +
			"and a NaN weight refuses it, in resume, `embed` and `export` alike; `embeddings.json` must give " +
			"its files' dimension, rows, sizes and SHA-256s. An export carries the SHA-256 of its tensor data, " +
			"which the generated Python module checks on loading, and every name that reaches that module is " +
			"an escaped string literal.",
		Tests: []Tests{
			{"./trainstep", []string{"TestForgedCheckpointsAreRefused", "TestExportModuleTakesAnyName", "TestMutatedCheckpointHeaders"}},
			{"./shards/embeddings", []string{"TestEmbeddingsManifestMustDescribeItsFiles"}},
		},
	},
	{
		Title: "Stored and on-the-fly views: the same where they can be, said where not.",
		Text: "With views stored raw (`--encoding=raw`, the default up to 96 px) the trainer reads, epoch for " +
			"epoch, the same batches from base shards as from stored passes, so a run can switch modes without " +
			"changing its results. Above 96 px stored views are JPEG (q95) by default and views made on the fly " +
			"are not: `preprocess` says so in its summary, and the views a dataset gives its trainer are " +
			"described differently in the two modes.",
		Tests: []Tests{
			{"./pipelines", []string{"TestOnlineViewsAreTheStoredPasses", "TestModesThatDifferSaySo"}},
			{"./cmd/dcl", []string{"TestTrainOnBaseShardsEqualsStoredPasses"}},
			{"./reproduce", []string{"TestOnlineViewsGiveTheStoredPassesResults"}},
			{"./shards", []string{"TestTrainerViewsTellTheModesApart"}},
		},
	},
	{
		Title: "Interrupts stop cleanly.",
		Text: "Ctrl-C stops `dcl train` with exit status 130 after a checkpoint that resumes it; t-SNE stops " +
			"with its context cancelled, while it computes the affinities and while it iterates. `dcl reproduce` " +
			"signalled in its report phase stops between two writes and exits 128+N (130 for SIGINT, 143 for " +
			"SIGTERM), leaving no report, history entry or temporary half-written; the same command, run " +
			"again, writes the report.",
		Tests: []Tests{
			{"./cmd/dcl", []string{"TestTrainInterruptExits130", "TestReproduceSignalledWhileReporting"}},
			{"./analysis", []string{"TestTSNEStopsWhenCancelled"}},
		},
	},
	{
		Title: "Strict decoding.",
		Text: "JSON the toolkit reads (manifests, embeddings.json, results, `dcl loss` batches) refuses " +
			"unknown fields, keys given twice and data after the value.",
		Tests: []Tests{
			{"./internal/storage", []string{"TestDecodeJSONIsStrict"}},
			{"./shards", []string{"TestReadManifestRefusesBadManifests"}},
			{"./shards/embeddings", []string{"TestEmbeddingsManifestRefusesForeignPaths"}},
			{"./analysis", []string{"TestJSONRoundTrips"}},
			{"./cmd/dcl", []string{"TestLossCommand"}},
		},
	},
	{
		Title: "Fuzzing in every test run.",
		Text: "Five classes of input are mutated from their seeds for `DCL_MUTATE_BUDGET` (1 s; 200 ms with " +
			"`-short`) in every `go test`, a failure naming the `DCL_MUTATE_SEED` that replays it: JPEGs decode " +
			"as the standard library's, state archives unpack all or nothing, configs parse or are refused, " +
			"checkpoint headers load or are refused, and file names give lock and temporary names that fit, " +
			"stay hidden and differ, and texts that read back as the name.",
		Tests: []Tests{
			{"./internal/jpeg", []string{"TestMutatedJPEGsDecodeAsTheStandardLibrary"}},
			{"./reproduce", []string{"TestMutatedStatesUnpackAllOrNothing", "TestMutatedConfigs"}},
			{"./trainstep", []string{"TestMutatedCheckpointHeaders"}},
			{"./internal/storage", []string{"TestMutatedNamesDeriveSafeNames"}},
			{"./internal/rawname", []string{"TestTextIsUTF8AndReadsBackExactly"}},
		},
	},
	{
		Title: "Fuzz targets for long hunts",
		Text: "(`go test -fuzz=NAME PACKAGE`; their seeds run in every test run): shard files, manifests, " +
			"embedding files and embeddings.json, checkpoint headers, reproduce configs, IDX headers and files, " +
			"fixed-size records, tars, augmentation and JPEG decoding.",
		Tests: []Tests{
			{"./shards", []string{"FuzzShardFile", "FuzzParseManifest"}},
			{"./shards/embeddings", []string{"FuzzEmbeddingFile", "FuzzEmbeddingsManifest"}},
			{"./trainstep", []string{"FuzzCheckpointHeader"}},
			{"./reproduce", []string{"FuzzParseConfig"}},
			{"./transforms/datasets", []string{"FuzzIDXHeader", "FuzzIDXFiles", "FuzzFixedRecords", "FuzzTar"}},
			{"./transforms/augment", []string{"FuzzView"}},
			{"./internal/jpeg", []string{"FuzzDecodesAsTheStandardLibrary"}},
		},
	},
}
