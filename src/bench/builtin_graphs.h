// Graphs compiled into the binary, so that tools have a default that needs no file or download.
// The text is examples/graphs/<name>.ofg, copied in at configure time (CMakeLists.txt,
// builtin_graphs.cc.in): the example file stays the one source.
#pragma once

namespace opfuse::bench {

// examples/graphs/llama_decoder_layer.ofg: one TinyLlama-1.1B decoder layer, symbolic T.
extern const char* const kLlamaDecoderLayerOfg;

}  // namespace opfuse::bench
