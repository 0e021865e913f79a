import io.anserini.analysis.DefaultEnglishAnalyzer;
import org.apache.lucene.analysis.Analyzer;
import org.apache.lucene.analysis.TokenStream;
import org.apache.lucene.analysis.tokenattributes.CharTermAttribute;
import java.io.*;
import java.nio.charset.StandardCharsets;
import java.util.*;

// How tests/data/lucene_english.json was made (Lucene 9.9.1 in Anserini 0.38.0's fatjar, Java 21+):
//   javac -cp anserini-fatjar.jar LuceneDump.java
//   java -cp anserini-fatjar.jar:. LuceneDump stem|nostem|porter < texts > tokens
// Input: one text per line (a newline inside a text written as \u0001, a carriage return as \u0003);
// output: the tokens of each text, separated by \u0002. "porter": PorterStemFilter alone on whitespace tokens.
public class LuceneDump {
  public static void main(String[] args) throws Exception {
    Analyzer a = args[0].equals("stem") ? DefaultEnglishAnalyzer.newDefaultInstance()
        : args[0].equals("nostem") ? DefaultEnglishAnalyzer.newNonStemmingInstance()
        : null;
    BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
    PrintWriter out = new PrintWriter(new OutputStreamWriter(System.out, StandardCharsets.UTF_8));
    String line;
    if (args[0].equals("porter")) {
      // stem each word with PorterStemFilter alone (whitespace tokenizer)
      Analyzer p = new Analyzer() {
        protected TokenStreamComponents createComponents(String f) {
          org.apache.lucene.analysis.core.WhitespaceTokenizer t = new org.apache.lucene.analysis.core.WhitespaceTokenizer();
          return new TokenStreamComponents(t, new org.apache.lucene.analysis.en.PorterStemFilter(t));
        }
      };
      a = p;
    }
    while ((line = in.readLine()) != null) {
      String text = line.replace('\u0001', '\n');
      TokenStream ts = a.tokenStream("contents", text);
      CharTermAttribute t = ts.addAttribute(CharTermAttribute.class);
      ts.reset();
      StringBuilder sb = new StringBuilder();
      boolean first = true;
      while (ts.incrementToken()) { if (!first) sb.append('\u0002'); sb.append(t.toString()); first = false; }
      ts.end(); ts.close();
      out.println(sb);
    }
    out.flush();
  }
}
