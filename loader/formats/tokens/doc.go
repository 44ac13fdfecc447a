// Package tokens is the loader's format of token files, "tokens": raw
// token files of one integer type (the Spec's token type) or llm.c shards
// (recognised by their magic, which carries the type), one object per
// shard. It also holds the window machinery every token format shares
// (package megatron's too): a token dataset's samples are windows of
// SeqLen+1 tokens starting every SeqLen tokens of the shards' streams
// concatenated in shard order, crossing file boundaries; a shard's rows
// are the windows starting in it, and its opening also acquires the shards
// its last windows run into. A batch holds one array, ArrayName, of shape
// (batch, SeqLen+1), always copied (windows overlap by a token), in the
// tokens' type or widened to int32 or int64 as gathered
// (loader.Config.TokenOut).
package tokens
