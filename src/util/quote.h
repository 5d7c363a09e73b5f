// Text from a user's file (a tensor name, a JSON key, a dtype string) shown inside an error message.
// Every parser of untrusted input (graph text, safetensors, profile DB, bench reports, config.json)
// promises one-line error messages (their fuzzers check it), so such text is never printed raw:
//
//   Quote("layers.0.w")   -> 'layers.0.w'          printable ASCII without ' or \: single quotes
//   Quote("a\nb")         -> "a\nb"                anything else: a JSON string (escapes, \u00XX,
//                                                  invalid UTF-8 replaced), so it stays one line
//   PathKey("hidden")     -> hidden                a JSON path component: bare when [A-Za-z0-9_]+
//   PathKey("a.b")        -> "a.b"                 else a JSON string
//   OneLine("x \"a\nb\"")   -> x "a\nb"              a finished message: control characters (a
//                                                  newline, a tab, ...) escaped as \n, \t, \u00XX;
//                                                  the last resort for messages that print user text
#pragma once
#include <string>
#include <string_view>

namespace opfuse {

std::string Quote(std::string_view s);
std::string PathKey(std::string_view key);
std::string OneLine(std::string_view message);

}  // namespace opfuse
