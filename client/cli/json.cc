#include "client/cli/json.h"

#include <google/protobuf/descriptor.h>
#include <google/protobuf/message.h>

#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "client/cli/format.h"

namespace dlcache {
namespace cli {
namespace {

using google::protobuf::FieldDescriptor;
using google::protobuf::Message;
using google::protobuf::Reflection;

void AppendMessage(
    const Message& m,
    const std::vector<std::pair<std::string, std::string>>& extra,
    std::string* out);

void AppendValue(const Message& m, const FieldDescriptor* f, int index,
                 std::string* out) {
  const Reflection* r = m.GetReflection();
  const bool rep = f->is_repeated();
  switch (f->cpp_type()) {
    case FieldDescriptor::CPPTYPE_INT32:
      absl::StrAppend(
          out, rep ? r->GetRepeatedInt32(m, f, index) : r->GetInt32(m, f));
      break;
    case FieldDescriptor::CPPTYPE_INT64:
      absl::StrAppend(
          out, rep ? r->GetRepeatedInt64(m, f, index) : r->GetInt64(m, f));
      break;
    case FieldDescriptor::CPPTYPE_UINT32:
      absl::StrAppend(
          out, rep ? r->GetRepeatedUInt32(m, f, index) : r->GetUInt32(m, f));
      break;
    case FieldDescriptor::CPPTYPE_UINT64:
      absl::StrAppend(
          out, rep ? r->GetRepeatedUInt64(m, f, index) : r->GetUInt64(m, f));
      break;
    case FieldDescriptor::CPPTYPE_DOUBLE:
      out->append(JsonNumber(rep ? r->GetRepeatedDouble(m, f, index)
                                 : r->GetDouble(m, f)));
      break;
    case FieldDescriptor::CPPTYPE_FLOAT:
      out->append(JsonNumber(rep ? r->GetRepeatedFloat(m, f, index)
                                 : r->GetFloat(m, f)));
      break;
    case FieldDescriptor::CPPTYPE_BOOL:
      out->append((rep ? r->GetRepeatedBool(m, f, index) : r->GetBool(m, f))
                      ? "true"
                      : "false");
      break;
    case FieldDescriptor::CPPTYPE_ENUM:
      out->append(JsonString(
          (rep ? r->GetRepeatedEnum(m, f, index) : r->GetEnum(m, f))->name()));
      break;
    case FieldDescriptor::CPPTYPE_STRING:
      out->append(JsonString(rep ? r->GetRepeatedString(m, f, index)
                                 : r->GetString(m, f)));
      break;
    case FieldDescriptor::CPPTYPE_MESSAGE:
      AppendMessage(
          rep ? r->GetRepeatedMessage(m, f, index) : r->GetMessage(m, f), {},
          out);
      break;
  }
}

void AppendMessage(
    const Message& m,
    const std::vector<std::pair<std::string, std::string>>& extra,
    std::string* out) {
  const google::protobuf::Descriptor* d = m.GetDescriptor();
  const Reflection* r = m.GetReflection();
  out->push_back('{');
  bool first = true;
  for (int i = 0; i < d->field_count(); ++i) {
    const FieldDescriptor* f = d->field(i);
    if (!first) out->push_back(',');
    first = false;
    absl::StrAppend(out, JsonString(f->name()), ":");
    if (f->is_repeated()) {
      out->push_back('[');
      const int n = r->FieldSize(m, f);
      for (int j = 0; j < n; ++j) {
        if (j > 0) out->push_back(',');
        AppendValue(m, f, j, out);
      }
      out->push_back(']');
    } else if (f->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE &&
               !r->HasField(m, f)) {
      out->append("null");
    } else {
      AppendValue(m, f, -1, out);
    }
  }
  for (const auto& [name, value] : extra) {
    if (!first) out->push_back(',');
    first = false;
    absl::StrAppend(out, JsonString(name), ":", value);
  }
  out->push_back('}');
}

}  // namespace

std::string ProtoToJson(
    const Message& message,
    const std::vector<std::pair<std::string, std::string>>& extra) {
  std::string out;
  AppendMessage(message, extra, &out);
  return out;
}

std::string JsonString(absl::string_view s) {
  std::string out;
  out.reserve(s.size() + 2);
  out.push_back('"');
  for (size_t i = 0; i < s.size();) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (c >= 0x80) {
      const size_t n = Utf8SequenceLength(s, i);
      if (n == 0) {
        // Not UTF-8: the byte as a lone low surrogate (PEP 383).
        out.append(absl::StrFormat("\\udc%02x", c));
        ++i;
      } else {
        out.append(s.data() + i, n);
        i += n;
      }
      continue;
    }
    switch (c) {
      case '"':
        out.append("\\\"");
        break;
      case '\\':
        out.append("\\\\");
        break;
      case '\n':
        out.append("\\n");
        break;
      case '\r':
        out.append("\\r");
        break;
      case '\t':
        out.append("\\t");
        break;
      default:
        if (c < 0x20) {
          out.append(absl::StrFormat("\\u%04x", c));
        } else {
          out.push_back(static_cast<char>(c));
        }
    }
    ++i;
  }
  out.push_back('"');
  return out;
}

std::string JsonNumber(double v) {
  if (!std::isfinite(v)) return "null";
  return absl::StrFormat("%.15g", v);
}

}  // namespace cli
}  // namespace dlcache
