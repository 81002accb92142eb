#pragma once
// Quoting user text inside a message: a value a user typed or a file held may contain a NUL
// (which would cut a C string short), escape sequences or a raw CR (which a terminal obeys), a
// UTF-8 byte-order mark (invisible) or megabytes. quote() shows it between double quotes with
// every such byte escaped, and truncated with the count of what was left out.
#include <cstddef>
#include <string>
#include <string_view>

namespace tpipe {

//! `text` between double quotes, control bytes and quotes escaped (\n, \r, \t, \0, \xHH), a
//! leading UTF-8 BOM named, at most `max_bytes` of it shown.
inline std::string quote(std::string_view text, std::size_t max_bytes = 120)
{
    std::string out = "\"";
    std::size_t from = 0;
    if (text.substr(0, 3) == "\xEF\xBB\xBF") {
        out += "<UTF-8 BOM>";
        from = 3;
    }
    const std::size_t end = text.size() - from > max_bytes ? from + max_bytes : text.size();
    for (std::size_t i = from; i < end; ++i) {
        const unsigned char c = static_cast<unsigned char>(text[i]);
        switch (c) {
        case '\n': out += "\\n"; break;
        case '\r': out += "\\r"; break;
        case '\t': out += "\\t"; break;
        case '\0': out += "\\0"; break;
        case '"': out += "\\\""; break;
        case '\\': out += "\\\\"; break;
        default:
            if (c < 0x20 || c == 0x7F) {
                const char* hex = "0123456789abcdef";
                out += "\\x";
                out += hex[c >> 4];
                out += hex[c & 15];
            } else {
                out += static_cast<char>(c);
            }
        }
    }
    out += '"';
    if (end < text.size()) out += " (" + std::to_string(text.size() - end) + " more bytes not shown)";
    return out;
}

//! A message as a terminal may print it: control bytes escaped as quote() escapes them (a
//! message is one line), at most `max_bytes` of it. The last line of defence, where a program
//! prints an error whose parts were not all quoted.
inline std::string printable(std::string_view message, std::size_t max_bytes = 4096)
{
    std::string out;
    const std::size_t end = message.size() > max_bytes ? max_bytes : message.size();
    for (std::size_t i = 0; i < end; ++i) {
        const unsigned char c = static_cast<unsigned char>(message[i]);
        if (c >= 0x20 && c != 0x7F) {
            out += static_cast<char>(c);
            continue;
        }
        const char* hex = "0123456789abcdef";
        switch (c) {
        case '\n': out += "\\n"; break;
        case '\r': out += "\\r"; break;
        case '\t': out += "\\t"; break;
        case '\0': out += "\\0"; break;
        default: out += "\\x"; out += hex[c >> 4]; out += hex[c & 15];
        }
    }
    if (end < message.size()) out += " ... (" + std::to_string(message.size() - end) + " more bytes not shown)";
    return out;
}

} // namespace tpipe
