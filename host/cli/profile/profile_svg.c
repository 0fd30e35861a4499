/*
 * profile_svg.c - the flame graph of a stack profile (see profile_svg.h).
 *
 * Geometry: rows of ROW_H px, depth 1 (the thread entry frames) just above the "all" bar, the
 * deepest row under the title. x and width are written with two decimals. Each frame's
 * <g> carries data-x and data-w (its left edge and width as fractions of all samples) and
 * data-d (its depth), which is all the script needs to zoom and search; the script never
 * fetches anything. Colours: a family per frame kind, the shade from a hash of the name, so a
 * function keeps its colour from one drawing to the next.
 *
 * The differential drawing (em_profile_svg_diff()) is the same graph of the breach's profile;
 * each node is matched to the baseline's node of the same frames (kind and name) from the
 * root (the baseline's own tree, walked child by child: parents are matched before their
 * children), and coloured by the change of its share: red grew, blue shrank, the saturation
 * in proportion to the change over the largest change drawn.
 */
#define _POSIX_C_SOURCE 200809L
#include "profile_svg.h"

#include "profile_stacks.h"
#include "view.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define ROW_H   16.0
#define TOP     52.0
#define BOTTOM  24.0
#define CHAR_PX 7.0 /* Width of one label character at the label's font size. */

/* The fill of a frame: its kind's colour family, the shade from its name. */
static void fill(FILE *out, em_profile_frame_kind_t kind, const char *name) {
  unsigned h = 2166136261u;
  for (const char *c = name; *c; c++) {
    h = (h ^ (unsigned char)*c) * 16777619u;
  }
  unsigned v = h % 64; /* 0..63 */
  unsigned r, g, b;
  switch (kind) {
  case EM_FRAME_PYTHON:
    r = 70 + v, g = 170 + v / 2, b = 70 + v / 2;
    break;
  case EM_FRAME_NATIVE:
    r = 225, g = 90 + v * 2, b = 40 + v / 2;
    break;
  case EM_FRAME_KERNEL:
    r = 70 + v / 2, g = 130 + v, b = 215;
    break;
  default:
    r = g = b = 160 + v / 2;
  }
  fprintf(out, "rgb(%u,%u,%u)", r, g, b);
}

/* The fill of a frame in the differential drawing: delta points of share, max the largest
 * change drawn (> 0). */
static void diff_fill(FILE *out, double delta, double max) {
  double k = delta < 0 ? -delta / max : delta / max;
  unsigned v = (unsigned)(230.0 - 190.0 * (k > 1 ? 1 : k));
  if (delta > 0) {
    fprintf(out, "rgb(255,%u,%u)", v, v);
  } else if (delta < 0) {
    fprintf(out, "rgb(%u,%u,255)", v, v);
  } else {
    fputs("rgb(230,230,230)", out);
  }
}

static const char *diff_class(double delta) {
  return delta > 0 ? "grew" : delta < 0 ? "shrank" : "same";
}

/* The baseline's side of a differential drawing: its tree, its samples, which of its nodes
 * each node of the breach's tree is (0: none), the breach's total and the largest change. */
typedef struct {
  const em_profile_t *p;
  const char *title;
  em_profile_tree_t t;
  uint32_t *match;
  uint64_t total, now_total;
  double max;
} diff_side_t;

static double share(uint64_t n, uint64_t total) {
  return total > 0 ? 100.0 * (double)n / (double)total : 0.0;
}

/* The change of node i's share, in points. */
static double node_delta(const diff_side_t *b, const em_profile_tree_t *t, size_t i) {
  uint64_t was = b->match[i] ? b->t.v[b->match[i]].samples : 0;
  return share(t->v[i].samples, b->now_total) - share(was, b->total);
}

/* Builds b's tree and matches every node of t to it. Returns 0 or -ENOMEM. */
static int diff_match(diff_side_t *b, const em_profile_t *p, const em_profile_tree_t *t) {
  if (em_profile_tree(b->p, &b->t) != 0) {
    return -ENOMEM;
  }
  b->match = calloc(t->n, sizeof(*b->match));
  if (!b->match) {
    return -ENOMEM;
  }
  b->total = em_profile_stacks_total(b->p);
  b->now_total = em_profile_stacks_total(p);
  for (size_t i = 1; i < t->n; i++) {
    uint32_t parent = t->v[i].parent;
    uint32_t at = parent == 0 ? 0 : b->match[parent];
    if (parent != 0 && at == 0) {
      continue; /* The caller is not in the baseline: neither is this. */
    }
    const em_profile_frame_t *f = &p->frames[t->v[i].frame];
    for (uint32_t c = b->t.v[at].first_child; c != 0; c = b->t.v[c].next_sibling) {
      const em_profile_frame_t *g = &b->p->frames[b->t.v[c].frame];
      if (g->kind == f->kind && strcmp(g->name, f->name) == 0) {
        b->match[i] = c;
        break;
      }
    }
  }
  for (size_t i = 1; i < t->n; i++) {
    double d = node_delta(b, t, i);
    d = d < 0 ? -d : d;
    b->max = d > b->max ? d : b->max;
  }
  b->max = b->max > 0 ? b->max : 1.0;
  return 0;
}

static const char SCRIPT[] =
    "<script type=\"text/ecmascript\"><![CDATA[\n"
    "var W=%.1f,M=%.1f,CH=%.1f;\n"
    "function frames(){return document.querySelectorAll('g.f');}\n"
    "function place(g,x0,w0,d0){var x=+g.dataset.x,w=+g.dataset.w,d=+g.dataset.d;\n"
    " var r=g.querySelector('rect'),t=g.querySelector('text');\n"
    " var nx=(x-x0)/w0,nw=w/w0;\n"
    " if(d<d0&&x<=x0+1e-12&&x+w>=x0+w0-1e-12){nx=0;nw=1;}\n"
    " var vis=nx<1&&nx+nw>0&&(d>=d0||nw>=1);\n"
    " g.style.display=vis?'':'none'; if(!vis)return;\n"
    " var px=M+Math.max(nx,0)*(W-2*M),pw=Math.min(nw,1-Math.max(nx,0))*(W-2*M);\n"
    " r.setAttribute('x',px.toFixed(2));r.setAttribute('width',pw.toFixed(2));\n"
    " t.setAttribute('x',(px+3).toFixed(2));var n=g.dataset.n,k=Math.floor((pw-6)/CH);\n"
    " t.textContent=k<3?'':(n.length<=k?n:n.slice(0,k-2)+'..');}\n"
    "function zoom(g){var x0=g?+g.dataset.x:0,w0=g?+g.dataset.w:1,d0=g?+g.dataset.d:0;\n"
    " frames().forEach(function(f){place(f,x0,w0,d0);});\n"
    " document.getElementById('unzoom').style.opacity=g?1:0.3;}\n"
    "function search(){var s=prompt('Search frames (regular expression):','');\n"
    " if(s===null)return; var re;try{re=new RegExp(s);}catch(e){alert(e);return;}\n"
    " var hit=[];frames().forEach(function(f){var r=f.querySelector('rect');\n"
    "  var m=s!==''&&re.test(f.dataset.n);r.classList.toggle('hit',m);\n"
    "  if(m)hit.push([+f.dataset.x,+f.dataset.x+(+f.dataset.w)]);});\n"
    " hit.sort(function(a,b){return a[0]-b[0];});var sum=0,end=-1;\n"
    " hit.forEach(function(h){if(h[1]>end){sum+=h[1]-Math.max(h[0],end);end=h[1];}});\n"
    " document.getElementById('matched').textContent=s===''?'':'Matched: "
    "'+(100*sum).toFixed(1)+'%%';}\n"
    "document.addEventListener('DOMContentLoaded',function(){\n"
    " frames().forEach(function(f){f.addEventListener('click',function(){zoom(f);});});\n"
    " document.getElementById('unzoom').addEventListener('click',function(){zoom(null);});\n"
    " document.getElementById('search').addEventListener('click',search);});\n"
    "]]></script>\n";

static void header(FILE *out, const em_profile_t *p, const char *title, double height,
                   uint64_t drawn, const diff_side_t *b) {
  fprintf(out,
          "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
          "<svg xmlns=\"http://www.w3.org/2000/svg\" version=\"1.1\" width=\"%.0f\" "
          "height=\"%.0f\" viewBox=\"0 0 %.0f %.0f\">\n",
          EM_PROFILE_SVG_WIDTH, height, EM_PROFILE_SVG_WIDTH, height);
  fputs("<style>\n"
        "text{font-family:monospace;font-size:12px;fill:#000}\n"
        ".title{font-size:15px;font-weight:bold} .sub{fill:#444}\n"
        "g.f{cursor:pointer} g.f text{pointer-events:none}\n"
        "rect.f{stroke:#fff;stroke-width:0.5} rect.hit{fill:#e040e0}\n"
        "rect.all{fill:#ccc} .btn{cursor:pointer;fill:#0645ad}\n"
        "</style>\n",
        out);
  fprintf(out, SCRIPT, EM_PROFILE_SVG_WIDTH, EM_PROFILE_SVG_MARGIN, CHAR_PX);
  fprintf(out, "<rect x=\"0\" y=\"0\" width=\"%.0f\" height=\"%.0f\" fill=\"#f8f8f4\"/>\n",
          EM_PROFILE_SVG_WIDTH, height);
  fprintf(out, "<text class=\"title\" x=\"%.1f\" y=\"18\">", EM_PROFILE_SVG_MARGIN);
  em_view_xml(out, title);
  const em_profile_trigger_t *t = &p->trigger;
  fprintf(out, " \xe2\x80\x94 %s, %s", em_profile_cause_name(t->cause), em_level_name(t->level));
  if (t->rule) {
    fputs(", rule ", out);
    em_view_xml(out, t->rule);
  }
  fprintf(out, " \xe2\x80\x94 %llu samples</text>\n", (unsigned long long)drawn);
  fprintf(out, "<text class=\"sub\" x=\"%.1f\" y=\"36\">", EM_PROFILE_SVG_MARGIN);
  em_view_xml(out, p->clock);
  fprintf(out, " at %u Hz over %.3f s, %llu lost", (unsigned)p->hz, (double)p->duration_ns / 1e9,
          (unsigned long long)p->lost);
  if (p->truncated.stacks_cut > 0) {
    fprintf(out, ", %llu stacks (%llu samples) cut", (unsigned long long)p->truncated.stacks_cut,
            (unsigned long long)p->truncated.samples_cut);
  }
  if (b) {
    fputs(", against ", out);
    em_view_xml(out, b->title);
    fputs(": share grew red, shrank blue", out);
  }
  fputs("</text>\n", out);
  if (b) {
    static const double deltas[] = {1.0, 0.25, -0.25, -1.0};
    static const char *const names[] = {"grew", "a little", "a little", "shrank"};
    double lx = EM_PROFILE_SVG_WIDTH - 520;
    for (size_t i = 0; i < 4; i++, lx += 80) {
      fprintf(out, "<rect class=\"legend\" x=\"%.1f\" y=\"27\" width=\"12\" height=\"12\" fill=\"",
              lx);
      diff_fill(out, deltas[i], 1.0);
      fprintf(out, "\"/><text x=\"%.1f\" y=\"37\">%s</text>\n", lx + 16, names[i]);
    }
  }
  static const em_profile_frame_kind_t kinds[] = {EM_FRAME_PYTHON, EM_FRAME_NATIVE, EM_FRAME_KERNEL,
                                                  EM_FRAME_UNKNOWN};
  double x = EM_PROFILE_SVG_WIDTH - 520;
  for (size_t i = 0; i < 4 && !b; i++, x += 80) {
    fprintf(out, "<rect class=\"legend\" x=\"%.1f\" y=\"27\" width=\"12\" height=\"12\" fill=\"",
            x);
    fill(out, kinds[i], "");
    fprintf(out, "\"/><text x=\"%.1f\" y=\"37\">%s</text>\n", x + 16,
            em_profile_frame_kind_name(kinds[i]));
  }
  fprintf(out,
          "<text id=\"unzoom\" class=\"btn\" x=\"%.1f\" y=\"37\" style=\"opacity:0.3\">"
          "Reset zoom</text>\n"
          "<text id=\"search\" class=\"btn\" x=\"%.1f\" y=\"37\">Search</text>\n"
          "<text id=\"matched\" x=\"%.1f\" y=\"%.1f\"></text>\n",
          EM_PROFILE_SVG_WIDTH - 190, EM_PROFILE_SVG_WIDTH - 80, EM_PROFILE_SVG_WIDTH - 200,
          height - 6);
}

/* Draws p; with b, coloured by the change against b's profile (diff_match() done). */
static void draw(FILE *out, const em_profile_t *p, const char *title, const em_profile_tree_t *tp,
                 const diff_side_t *b) {
  const em_profile_tree_t t = *tp;
  double height = TOP + ((double)t.max_depth + 1) * ROW_H + BOTTOM;
  uint64_t drawn = t.v[0].samples;
  double total = drawn > 0 ? (double)drawn : 1.0;
  double span = EM_PROFILE_SVG_WIDTH - 2 * EM_PROFILE_SVG_MARGIN;
  header(out, p, title ? title : "", height, drawn, b);
  double y_all = TOP + (double)t.max_depth * ROW_H;
  fprintf(out,
          "<rect class=\"all\" x=\"%.2f\" y=\"%.2f\" width=\"%.2f\" height=\"%.1f\">"
          "<title>all: %llu samples</title></rect>\n",
          EM_PROFILE_SVG_MARGIN, y_all, drawn > 0 ? span : 0.0, ROW_H - 1,
          (unsigned long long)drawn);
  for (size_t i = 1; i < t.n; i++) {
    const em_profile_node_t *nd = &t.v[i];
    const em_profile_frame_t *f = &p->frames[nd->frame];
    double fx = (double)nd->x / total;
    double fw = (double)nd->samples / total;
    double x = EM_PROFILE_SVG_MARGIN + fx * span;
    double w = fw * span;
    double y = TOP + (double)(t.max_depth - nd->depth) * ROW_H;
    fprintf(out, "<g class=\"f\" data-x=\"%.9f\" data-w=\"%.9f\" data-d=\"%u\" data-n=\"", fx, fw,
            (unsigned)nd->depth);
    em_view_xml(out, f->name);
    fprintf(out,
            "\"><rect class=\"f %s%s%s\" x=\"%.2f\" y=\"%.2f\" width=\"%.2f\" "
            "height=\"%.1f\" fill=\"",
            em_profile_frame_kind_name(f->kind), b ? " " : "",
            b ? diff_class(node_delta(b, &t, i)) : "", x, y, w, ROW_H - 1);
    if (b) {
      diff_fill(out, node_delta(b, &t, i), b->max);
    } else {
      fill(out, f->kind, f->name);
    }
    fputs("\"><title>", out);
    em_view_xml(out, f->name);
    if (f->module) {
      fputs(" (", out);
      em_view_xml(out, f->module);
      fputc(')', out);
    }
    fprintf(out, " \xe2\x80\x94 %s, %llu samples, %.2f%%", em_profile_frame_kind_name(f->kind),
            (unsigned long long)nd->samples, 100.0 * fw);
    if (b) {
      uint64_t was = b->match[i] ? b->t.v[b->match[i]].samples : 0;
      fprintf(out, "; share %.2f%% against the baseline's %.2f%% (%+.2f points)",
              share(nd->samples, b->now_total), share(was, b->total), node_delta(b, &t, i));
    }
    fprintf(out, "</title></rect><text x=\"%.2f\" y=\"%.2f\">", x + 3, y + ROW_H - 4);
    size_t fit = w > 6 ? (size_t)((w - 6) / CHAR_PX) : 0;
    size_t len = strlen(f->name);
    if (fit >= 3) {
      if (len <= fit) {
        em_view_xml(out, f->name);
      } else {
        size_t keep = fit - 2;
        while (keep > 0 && ((unsigned char)f->name[keep] & 0xC0) == 0x80) {
          keep--; /* Not inside a UTF-8 sequence. */
        }
        char cut[EM_PROFILE_MAX_FRAME_BYTES + 3];
        snprintf(cut, sizeof(cut), "%.*s..", (int)keep, f->name);
        em_view_xml(out, cut);
      }
    }
    fputs("</text></g>\n", out);
  }
  fputs("</svg>\n", out);
}

int em_profile_svg(FILE *out, const em_profile_t *p, const char *title) {
  em_profile_tree_t t;
  if (em_profile_tree(p, &t) != 0) {
    return -ENOMEM;
  }
  draw(out, p, title, &t, NULL);
  em_profile_tree_free(&t);
  return ferror(out) ? -EIO : 0;
}

int em_profile_svg_diff(FILE *out, const em_profile_t *p, const char *title,
                        const em_profile_t *base, const char *base_title) {
  em_profile_tree_t t;
  if (em_profile_tree(p, &t) != 0) {
    return -ENOMEM;
  }
  diff_side_t b = {.p = base, .title = base_title ? base_title : ""};
  int rc = diff_match(&b, p, &t);
  if (rc == 0) {
    draw(out, p, title, &t, &b);
    rc = ferror(out) ? -EIO : 0;
  }
  free(b.match);
  em_profile_tree_free(&b.t);
  em_profile_tree_free(&t);
  return rc;
}
