// The .ofg text format: printer and parser (grammar in docs/graph_format.md).
//
// One statement per line; '#' starts a comment. Printing then parsing gives back the same graph
// (tests/unit/text_format_test.cc checks print(parse(print(g))) == print(g)). Every parse error is
// "line N: <problem>", and the parser never crashes on bad bytes (tests/fuzz/fuzz_graph_text.cc).
#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>

#include <fmt/format.h>

#include "opfuse/graph.h"
#include "util/files.h"

namespace opfuse {

// ------------------------------------------------------------------ printer
std::string PrintGraph(const Graph& g, bool with_groups) {
  std::string out = fmt::format("graph {}\n", g.name);
  for (int v : g.inputs) {
    const Value& val = g.values[v];
    out += fmt::format("{} {}: {}\n", val.kind == ValueKind::kParam ? "param" : "input", val.name, val.type.ToString());
  }
  std::map<int, int> group_of_first;
  if (with_groups)
    for (size_t i = 0; i < g.groups.size(); ++i)
      if (!g.groups[i].nodes.empty()) group_of_first[g.groups[i].nodes.front()] = static_cast<int>(i);
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const Node& n = g.nodes[i];
    if (n.dead) continue;
    if (auto it = group_of_first.find(static_cast<int>(i)); it != group_of_first.end()) {
      const FusionGroup& grp = g.groups[it->second];
      out += fmt::format("# group {} [{}] {}{}{}\n", it->second, grp.kind, grp.decision.ToString(),
                         grp.variant == Variant::kAuto ? "" : std::string(" variant=") + VariantName(grp.variant), grp.name.empty() ? "" : " kernel=" + grp.name);
    }
    std::string lhs;
    for (size_t k = 0; k < n.outputs.size(); ++k) {
      const Value& v = g.values[n.outputs[k]];
      lhs += fmt::format("{}{}: {}", k ? ", " : "", v.name, v.type.ToString());
    }
    std::string args;
    for (size_t k = 0; k < n.inputs.size(); ++k) args += (k ? ", " : "") + g.values[n.inputs[k]].name;
    std::string attrs;
    for (const auto& [key, val] : n.attrs) {
      std::string text = AttrToString(val);
      if (std::holds_alternative<std::string>(val)) text = fmt::format("\"{}\"", text);
      attrs += fmt::format("{}{}={}", attrs.empty() ? "" : ", ", key, text);
    }
    out += fmt::format("{} = {}({}){}\n", lhs, OpName(n.op), args, attrs.empty() ? "" : " {" + attrs + "}");
  }
  std::string outs;
  for (size_t k = 0; k < g.outputs.size(); ++k) outs += (k ? ", " : "") + g.values[g.outputs[k]].name;
  out += fmt::format("output {}\n", outs);
  return out;
}

// ------------------------------------------------------------------ lexer
namespace {

enum class Tok { kIdent, kInt, kFloat, kString, kPunct, kEnd };
struct Token {
  Tok kind;
  std::string text;
  int64_t i = 0;
  double f = 0;
};

class LineLexer {
 public:
  LineLexer(std::string_view line, int lineno) : s_(line), line_(lineno) {}

  Status Lex(std::vector<Token>* out) {
    size_t i = 0;
    while (i < s_.size()) {
      char c = s_[i];
      if (c == '#') break;
      if (c == ' ' || c == '\t' || c == '\r') { ++i; continue; }
      if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
        size_t j = i;
        while (j < s_.size() && (std::isalnum(static_cast<unsigned char>(s_[j])) || s_[j] == '_' || s_[j] == '.')) ++j;
        out->push_back({Tok::kIdent, std::string(s_.substr(i, j - i))});
        i = j;
        continue;
      }
      if (std::isdigit(static_cast<unsigned char>(c)) ||
          ((c == '-' || c == '+' || c == '.') && i + 1 < s_.size() && (std::isdigit(static_cast<unsigned char>(s_[i + 1])) || s_[i + 1] == '.'))) {
        size_t j = i + 1;
        bool is_float = (c == '.');
        while (j < s_.size()) {
          char d = s_[j];
          if (std::isdigit(static_cast<unsigned char>(d))) { ++j; continue; }
          if (d == '.' ) { is_float = true; ++j; continue; }
          if ((d == 'e' || d == 'E') && j + 1 < s_.size()) {
            is_float = true;
            ++j;
            if (s_[j] == '-' || s_[j] == '+') ++j;
            continue;
          }
          break;
        }
        std::string text(s_.substr(i, j - i));
        Token t{is_float ? Tok::kFloat : Tok::kInt, text};
        errno = 0;
        char* end = nullptr;
        if (is_float) t.f = std::strtod(text.c_str(), &end);
        else t.i = std::strtoll(text.c_str(), &end, 10);
        // Overflow is an error; underflow (a subnormal, or a tiny value read as 0) is not: the
        // printer writes subnormal attributes (e.g. 1e-310) and must be able to read them back.
        bool range_error = errno == ERANGE && (!is_float || std::isinf(t.f));
        if (range_error || end != text.c_str() + text.size())
          return Err(fmt::format("bad number '{}'", text));
        out->push_back(t);
        i = j;
        continue;
      }
      if (c == '"') {
        size_t j = s_.find('"', i + 1);
        if (j == std::string_view::npos) return Err("unterminated string");
        out->push_back({Tok::kString, std::string(s_.substr(i + 1, j - i - 1))});
        i = j + 1;
        continue;
      }
      if (std::string_view("()[]{},:=-").find(c) != std::string_view::npos) {
        out->push_back({Tok::kPunct, std::string(1, c)});
        ++i;
        continue;
      }
      if (static_cast<unsigned char>(c) < 32 || static_cast<unsigned char>(c) >= 127)
        return Err(fmt::format("unexpected byte 0x{:02x}", static_cast<unsigned char>(c)));
      return Err(fmt::format("unexpected character '{}'", c));
    }
    out->push_back({Tok::kEnd, "end of line"});
    return Status::Ok();
  }

 private:
  Status Err(const std::string& m) const { return InvalidArgument(fmt::format("line {}: {}", line_, m)); }
  std::string_view s_;
  int line_;
};

// ------------------------------------------------------------------ parser
class Parser {
 public:
  Parser(std::vector<Token> toks, int line) : t_(std::move(toks)), line_(line) {}

  Status Err(const std::string& m) const { return InvalidArgument(fmt::format("line {}: {}", line_, m)); }
  const Token& Peek() const { return t_[pos_]; }
  bool IsPunct(const char* p) const { return Peek().kind == Tok::kPunct && Peek().text == p; }
  bool AtEnd() const { return Peek().kind == Tok::kEnd; }
  Status Expect(const char* p) {
    if (!IsPunct(p)) return Err(fmt::format("expected '{}', found '{}'", p, Peek().text));
    ++pos_;
    return Status::Ok();
  }
  StatusOr<std::string> Ident(const char* what) {
    if (Peek().kind != Tok::kIdent) return Err(fmt::format("expected {}, found '{}'", what, Peek().text));
    return t_[pos_++].text;
  }
  Status ExpectEnd() {
    if (!AtEnd()) return Err(fmt::format("unexpected '{}' at end of statement", Peek().text));
    return Status::Ok();
  }

  StatusOr<Dim> ParseDim() {
    if (Peek().kind == Tok::kInt) return Dim(t_[pos_++].i);
    if (Peek().kind == Tok::kIdent) return Dim::Sym(t_[pos_++].text);
    return Err(fmt::format("expected a dim (integer or symbol), found '{}'", Peek().text));
  }
  StatusOr<DimList> ParseDimList() {
    OPFUSE_RETURN_IF_ERROR(Expect("["));
    DimList dims;
    if (IsPunct("]")) { ++pos_; return dims; }
    while (true) {
      OPFUSE_ASSIGN_OR_RETURN(Dim d, ParseDim());
      dims.push_back(d);
      if (IsPunct("]")) { ++pos_; return dims; }
      OPFUSE_RETURN_IF_ERROR(Expect(","));
    }
  }
  StatusOr<TensorType> ParseType() {
    OPFUSE_ASSIGN_OR_RETURN(std::string dt, Ident("a dtype"));
    auto d = DTypeFromName(dt);
    if (!d) return Err(fmt::format("unknown dtype '{}' (f32, f16, bf16, i32, i64, bool)", dt));
    OPFUSE_ASSIGN_OR_RETURN(DimList dims, ParseDimList());
    // Same bound as the verifier (kMaxElements there), checked here so the error names the line.
    constexpr int64_t kMax = int64_t{1} << 48;
    __int128 elems = 1;
    for (const auto& dim : dims) {
      if (!dim.is_static()) continue;
      if (dim.value < 0) return Err(fmt::format("negative dim {} in type", dim.value));
      if (dim.value > kMax) return Err(fmt::format("dim {} in type is larger than 2^48", dim.value));
      if (dim.value > 1) elems *= dim.value;
      if (elems > kMax) return Err(fmt::format("type {}{} has more than 2^48 elements", dt, AttrToString(dims)));
    }
    return TensorType{*d, dims};
  }
  StatusOr<AttrValue> ParseAttrValue() {
    const Token& t = Peek();
    if (t.kind == Tok::kInt) { ++pos_; return AttrValue(t.i); }
    if (t.kind == Tok::kFloat) { ++pos_; return AttrValue(t.f); }
    if (t.kind == Tok::kString) { ++pos_; return AttrValue(t.text); }
    if (IsPunct("[")) {
      OPFUSE_ASSIGN_OR_RETURN(DimList l, ParseDimList());
      return AttrValue(l);
    }
    bool neg = false;
    if (IsPunct("-")) { neg = true; ++pos_; }
    if (Peek().kind == Tok::kIdent) {
      std::string id = t_[pos_++].text;
      if (id == "inf") return AttrValue(neg ? -HUGE_VAL : HUGE_VAL);
      if (id == "nan" && !neg) return AttrValue(std::nan(""));
      if (!neg) return AttrValue(id);
    }
    return Err(fmt::format("expected an attribute value, found '{}'", Peek().text));
  }

  std::vector<Token> t_;
  size_t pos_ = 0;
  int line_;
};

}  // namespace

StatusOr<Graph> ParseGraphUnverified(std::string_view text) {
  Graph g;
  bool have_header = false, have_output = false;
  std::map<std::string, int> names;
  std::vector<std::pair<std::string, int>> output_names;  // name, line
  int lineno = 0;
  size_t start = 0;
  while (start <= text.size()) {
    size_t nl = text.find('\n', start);
    std::string_view line = text.substr(start, nl == std::string_view::npos ? std::string_view::npos : nl - start);
    start = nl == std::string_view::npos ? text.size() + 1 : nl + 1;
    ++lineno;
    std::vector<Token> toks;
    OPFUSE_RETURN_IF_ERROR(LineLexer(line, lineno).Lex(&toks));
    Parser p(std::move(toks), lineno);
    if (p.AtEnd()) continue;
    if (!have_header) {
      if (p.Peek().kind != Tok::kIdent || p.Peek().text != "graph")
        return p.Err(fmt::format("expected 'graph NAME' as the first statement, found '{}'", p.Peek().text));
      ++p.pos_;
      OPFUSE_ASSIGN_OR_RETURN(g.name, p.Ident("a graph name"));
      OPFUSE_RETURN_IF_ERROR(p.ExpectEnd());
      have_header = true;
      continue;
    }
    if (have_output) return p.Err("statement after 'output' (output must be the last statement)");
    const Token& first = p.Peek();
    if (first.kind == Tok::kIdent && (first.text == "input" || first.text == "param") && p.t_[1].kind == Tok::kIdent) {
      ValueKind kind = first.text == "input" ? ValueKind::kInput : ValueKind::kParam;
      ++p.pos_;
      OPFUSE_ASSIGN_OR_RETURN(std::string name, p.Ident("an input name"));
      OPFUSE_RETURN_IF_ERROR(p.Expect(":"));
      OPFUSE_ASSIGN_OR_RETURN(TensorType type, p.ParseType());
      OPFUSE_RETURN_IF_ERROR(p.ExpectEnd());
      if (!g.nodes.empty()) return p.Err(fmt::format("{} '{}' after the first op (declare inputs first)", first.text, name));
      if (names.count(name)) return p.Err(fmt::format("value '{}' defined twice", name));
      names[name] = g.AddValue(name, type, kind);
      g.values[names[name]].declared = true;
      continue;
    }
    if (first.kind == Tok::kIdent && first.text == "output" && p.t_[1].kind == Tok::kIdent) {
      ++p.pos_;
      while (true) {
        OPFUSE_ASSIGN_OR_RETURN(std::string name, p.Ident("an output name"));
        output_names.emplace_back(name, lineno);
        if (p.AtEnd()) break;
        OPFUSE_RETURN_IF_ERROR(p.Expect(","));
      }
      have_output = true;
      continue;
    }
    // lhs = op(args) {attrs}
    std::vector<std::pair<std::string, std::optional<TensorType>>> lhs;
    while (true) {
      OPFUSE_ASSIGN_OR_RETURN(std::string name, p.Ident("a value name, 'input', 'param' or 'output'"));
      std::optional<TensorType> type;
      if (p.IsPunct(":")) {
        ++p.pos_;
        OPFUSE_ASSIGN_OR_RETURN(type, p.ParseType());
      }
      lhs.emplace_back(name, type);
      if (p.IsPunct("=")) { ++p.pos_; break; }
      OPFUSE_RETURN_IF_ERROR(p.Expect(","));
    }
    OPFUSE_ASSIGN_OR_RETURN(std::string opname, p.Ident("an op name"));
    auto op = OpFromName(opname);
    if (!op) return p.Err(fmt::format("unknown op '{}'", opname));
    OPFUSE_RETURN_IF_ERROR(p.Expect("("));
    std::vector<int> args;
    if (!p.IsPunct(")")) {
      while (true) {
        OPFUSE_ASSIGN_OR_RETURN(std::string arg, p.Ident("an argument name"));
        auto it = names.find(arg);
        if (it == names.end()) return p.Err(fmt::format("{}: undefined value '{}'", opname, arg));
        args.push_back(it->second);
        if (p.IsPunct(")")) break;
        OPFUSE_RETURN_IF_ERROR(p.Expect(","));
      }
    }
    ++p.pos_;  // ')'
    Attrs attrs;
    if (p.IsPunct("{")) {
      ++p.pos_;
      if (!p.IsPunct("}")) {
        while (true) {
          OPFUSE_ASSIGN_OR_RETURN(std::string key, p.Ident("an attribute name"));
          if (key[0] == '_')  // the passes' own annotations (OpDef::attrs): never from a file
            return p.Err(fmt::format("attribute '{}': names beginning with '_' are reserved for opfuse's passes", key));
          OPFUSE_RETURN_IF_ERROR(p.Expect("="));
          OPFUSE_ASSIGN_OR_RETURN(AttrValue val, p.ParseAttrValue());
          if (attrs.count(key)) return p.Err(fmt::format("attribute '{}' given twice", key));
          attrs[key] = std::move(val);
          if (p.IsPunct("}")) break;
          OPFUSE_RETURN_IF_ERROR(p.Expect(","));
        }
      }
      ++p.pos_;  // '}'
    }
    OPFUSE_RETURN_IF_ERROR(p.ExpectEnd());
    const OpInfo& info = GetOpInfo(*op);
    if (static_cast<int>(lhs.size()) != info.num_outputs)
      return p.Err(fmt::format("arity: {} produces {} output{}, {} named", opname, info.num_outputs,
                               info.num_outputs == 1 ? "" : "s", lhs.size()));
    std::vector<std::string> out_names;
    std::vector<TensorType> out_types;
    for (auto& [name, type] : lhs) {
      // Also catches `y, y = op(...)`, which would otherwise reach the verifier without a line.
      if (names.count(name) || std::count(out_names.begin(), out_names.end(), name))
        return p.Err(fmt::format("value '{}' defined twice", name));
      out_names.push_back(name);
      out_types.push_back(type.value_or(TensorType{}));
    }
    int nid = g.AddNode(*op, args, out_types, attrs, out_names);
    g.nodes[nid].line = lineno;
    for (size_t k = 0; k < lhs.size(); ++k) {
      int v = g.nodes[nid].outputs[k];
      names[lhs[k].first] = v;
      g.values[v].declared = lhs[k].second.has_value();
    }
  }
  if (!have_header) return InvalidArgument("line 1: empty graph (expected 'graph NAME')");
  // The last line as an editor counts it: a final '\n' ends the last line, it does not start one.
  const int last_line = std::max(1, lineno - (!text.empty() && text.back() == '\n' ? 1 : 0));
  if (!have_output) return InvalidArgument(fmt::format("line {}: missing 'output NAME, ...' statement", last_line));
  for (auto& [name, line] : output_names) {
    auto it = names.find(name);
    if (it == names.end()) return InvalidArgument(fmt::format("line {}: output: undefined value '{}'", line, name));
    g.outputs.push_back(it->second);
  }
  return g;
}

StatusOr<Graph> ParseGraph(std::string_view text) {
  OPFUSE_ASSIGN_OR_RETURN(Graph g, ParseGraphUnverified(text));
  OPFUSE_RETURN_IF_ERROR(VerifyAndInfer(g));
  return g;
}

StatusOr<Graph> ParseGraphFile(const std::string& path) {
  auto text = ReadFileCapped(path, kMaxGraphFileBytes);
  if (!text.ok()) return InvalidArgument(text.status().message());
  auto g = ParseGraph(*text);
  if (!g.ok()) return InvalidArgument(fmt::format("{}: {}", path, g.status().message()));
  return g;
}

}  // namespace opfuse
