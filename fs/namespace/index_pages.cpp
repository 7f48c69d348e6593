#include "fs/namespace/index_pages.h"

#include "fs/common/percent.h"

namespace whfs::ns {
namespace {

constexpr std::string_view kHead =
    "<!DOCTYPE html>\n<html>\n<head>\n<meta name=\"pypi:repository-version\" content=\"1.1\">\n";

}  // namespace

std::string html_escape(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out.push_back(c);
    }
  }
  return out;
}

std::string simple_root_page(const std::vector<std::string>& projects) {
  std::string page(kHead);
  page += "<title>Simple index</title>\n</head>\n<body>\n";
  for (const auto& p : projects) {
    page += "<a href=\"" + percent_encode(p) + "/\">" + html_escape(p) + "</a><br/>\n";
  }
  return page + "</body>\n</html>\n";
}

std::string simple_project_page(std::string_view project, const std::vector<PageLink>& links) {
  std::string page(kHead);
  page += "<title>Links for " + html_escape(project) + "</title>\n</head>\n<body>\n<h1>Links for " +
          html_escape(project) + "</h1>\n";
  for (const auto& l : links) {
    page += "<a href=\"" + percent_encode(l.file);
    if (!l.sha256.empty()) page += "#sha256=" + html_escape(l.sha256);
    page += "\"";
    if (!l.requires_python.empty()) {
      page += " data-requires-python=\"" + html_escape(l.requires_python) + "\"";
    }
    if (l.metadata_sha256) {
      const std::string v = "sha256=" + html_escape(*l.metadata_sha256);
      page += " data-core-metadata=\"" + v + "\" data-dist-info-metadata=\"" + v + "\"";
    }
    page += ">" + html_escape(l.file) + "</a><br/>\n";
  }
  return page + "</body>\n</html>\n";
}

}  // namespace whfs::ns
